//! Timestamps: the `date-time`/`date` formats the server accepts, and kubectl's human durations.
//!
//! Calendar arithmetic and validation are `jiff`'s; what is written here is only the shape each
//! format demands, which is narrower (the `date-time` format check) or wider (unzoned date-times
//! read as UTC) than what `jiff` parses.

use jiff::Timestamp;
use jiff::civil::{Date, DateTime};
use jiff::tz::TimeZone;

/// Parses `YYYY-MM-DD` (exactly: four-digit year, two-digit month and day).
pub(crate) fn parse_date(s: &str) -> Option<Date> {
    let b = s.as_bytes();
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return None;
    }
    let digits = |r: std::ops::Range<usize>| b[r].iter().all(u8::is_ascii_digit);
    if !(digits(0..4) && digits(5..7) && digits(8..10)) {
        return None;
    }
    s.parse::<Date>().ok()
}

/// Parses a date-time as the server's `date-time` format accepts it: RFC 3339 (`T` or space
/// separator, optional fraction, `Z` or a numeric offset with or without a colon), and the ISO 8601
/// variants without seconds or without a zone (read as UTC). Returns seconds since the epoch.
pub(crate) fn parse_date_time(s: &str) -> Option<i64> {
    // A date and at least `hh:mm` after one separator (jiff would also take a bare date).
    if s.len() < 16 || !s.is_char_boundary(10) || !s.is_char_boundary(16) {
        return None;
    }
    parse_date(&s[..10])?;
    if !matches!(s.as_bytes()[10], b'T' | b't' | b' ') || s.as_bytes()[13] != b':' {
        return None;
    }
    // jiff's ISO 8601 parser takes `T` only.
    let text = format!("{}T{}", &s[..10], &s[11..]);
    if let Ok(t) = text.parse::<Timestamp>() {
        return Some(t.as_second());
    }
    let civil = text.parse::<DateTime>().ok()?;
    Some(civil.to_zoned(TimeZone::UTC).ok()?.timestamp().as_second())
}

/// Whether a string passes the `date-time` format check of CRD validation: a full date, `T`
/// (either case), `hh:mm:ss`, an optional fraction, and `Z` or a `±hh:mm` offset.
pub(crate) fn is_date_time(s: &str) -> bool {
    let upper = s.to_ascii_uppercase();
    let b = upper.as_bytes();
    if b.len() < 20 || b.get(10) != Some(&b'T') || b[13] != b':' || b[16] != b':' {
        return false;
    }
    let mut rest = &b[19..];
    if rest.first() == Some(&b'.') {
        let n = rest[1..].iter().take_while(|c| c.is_ascii_digit()).count();
        if n == 0 {
            return false;
        }
        rest = &rest[1 + n..];
    }
    let zone_ok = match rest {
        [b'Z'] => true,
        [b'+' | b'-', h1, h2, b':', m1, m2] => [h1, h2, m1, m2].iter().all(|c| c.is_ascii_digit()),
        _ => false,
    };
    // A leap second (`:60`) is no valid RFC 3339 time here; jiff would read it as `:59`.
    let seconds_ok = b[17].is_ascii_digit() && b[18].is_ascii_digit() && b[17] <= b'5';
    zone_ok
        && seconds_ok
        && parse_date(&upper[..10]).is_some()
        && upper.parse::<Timestamp>().is_ok()
}

/// Formats seconds since the epoch as RFC 3339 UTC (`2006-01-02T15:04:05Z`).
pub(crate) fn format_rfc3339(secs: i64) -> String {
    Timestamp::from_second(secs)
        .unwrap_or(Timestamp::UNIX_EPOCH)
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// A duration as kubectl and the server's table printers show ages ("45s", "3m20s", "5h", "12d").
pub(crate) fn human_duration(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".into();
    }
    if seconds < 0 {
        return "0s".into();
    }
    if seconds < 120 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = seconds / 3600;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 {
            format!("{}d", hours / 24)
        } else {
            format!("{}d{h}h", hours / 24)
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let dy = (hours / 24) % 365;
        return if dy == 0 {
            format!("{}y", hours / 24 / 365)
        } else {
            format!("{}y{dy}d", hours / 24 / 365)
        };
    }
    format!("{}y", hours / 24 / 365)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_variants_parse_to_the_same_instant() {
        let z = parse_date_time("2024-03-01T12:00:00Z").unwrap();
        assert_eq!(z, 1_709_294_400);
        assert_eq!(parse_date_time("2024-03-01T13:30:00+01:30"), Some(z));
        assert_eq!(parse_date_time("2024-03-01T11:00:00.123-0100"), Some(z));
        assert_eq!(parse_date_time("2024-03-01 12:00:00Z"), Some(z));
        assert_eq!(parse_date_time("2024-03-01T12:00:00"), Some(z));
        assert_eq!(parse_date_time("2024-03-01T12:00Z"), Some(z));
        assert_eq!(format_rfc3339(z), "2024-03-01T12:00:00Z");
    }

    #[test]
    fn malformed_timestamps_are_rejected() {
        for bad in [
            "",
            "2024-02-30T00:00:00Z",
            "2024-13-01T00:00:00Z",
            "2024-03-01",
            "yesterday",
            "2024-03-01T25:00:00Z",
            "2024-03-01T12:00:00+1",
            "2024-03-01T12:00:00é",
            "2024-03-01T12:0é:00Z",
        ] {
            assert_eq!(parse_date_time(bad), None, "{bad}");
        }
        assert!(parse_date("2024-02-29").is_some());
        assert!(parse_date("2023-02-29").is_none());
    }

    #[test]
    fn the_date_time_format_check_is_strict_rfc3339() {
        for ok in [
            "2024-03-01T12:00:00Z",
            "2024-03-01t12:00:00z",
            "2024-03-01T12:00:00.123456+01:30",
            "2024-02-29T23:59:59-00:00",
        ] {
            assert!(is_date_time(ok), "{ok}");
        }
        for bad in [
            "2024-03-01 12:00:00Z",
            "2024-03-01T12:00:00",
            "2024-03-01T12:00Z",
            "2024-03-01T12:00:00+0100",
            "2024-03-01T24:00:00Z",
            "2024-03-01T12:00:60Z",
            "2023-02-29T00:00:00Z",
            "2024-03-01T12:00:00.Z",
            "",
            "T",
            "2024-03-01Té",
        ] {
            assert!(!is_date_time(bad), "{bad}");
        }
    }

    #[test]
    fn human_durations_match_kubectl() {
        let cases = [
            (-5, "<invalid>"),
            (-1, "0s"),
            (5, "5s"),
            (119, "119s"),
            (200, "3m20s"),
            (300, "5m"),
            (3000, "50m"),
            (3 * 3600 + 600, "3h10m"),
            (20 * 3600, "20h"),
            (3 * 86400 + 3600, "3d1h"),
            (30 * 86400, "30d"),
            (3 * 365 * 86400 + 86400, "3y1d"),
            (10 * 365 * 86400, "10y"),
        ];
        for (secs, want) in cases {
            assert_eq!(human_duration(secs), want, "{secs}");
        }
    }
}
