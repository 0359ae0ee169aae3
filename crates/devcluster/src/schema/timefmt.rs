//! Timestamps: the `date-time`/`date` formats the server accepts, and kubectl's human durations.

/// Days since 1970-01-01 of a civil date (proleptic Gregorian).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        _ => 28,
    }
}

fn digits(s: &str) -> Option<i64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Parses `YYYY-MM-DD` to days since the epoch.
pub(crate) fn parse_date(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return None;
    }
    let (y, m, d) = (digits(&s[0..4])?, digits(&s[5..7])?, digits(&s[8..10])?);
    if !(1..=12).contains(&m) || d < 1 || d > days_in_month(y, m) {
        return None;
    }
    Some(days_from_civil(y, m, d))
}

/// Parses a date-time as the server's `date-time` format accepts it: RFC 3339 (`T` or space
/// separator, optional fraction, `Z` or a numeric offset with or without a colon), and the ISO 8601
/// variants without seconds or without a zone (read as UTC). Returns seconds since the epoch.
pub(crate) fn parse_date_time(s: &str) -> Option<i64> {
    if s.len() < 16 || !s.is_char_boundary(10) || !s.is_char_boundary(16) {
        return None;
    }
    let days = parse_date(&s[..10])?;
    let sep = s.as_bytes()[10];
    if !matches!(sep, b'T' | b't' | b' ') {
        return None;
    }
    let hm = &s.as_bytes()[11..16];
    if hm[2] != b':' {
        return None;
    }
    let (h, mi) = (digits(&s[11..13])?, digits(&s[14..16])?);
    let mut rest = &s[16..];
    let mut sec = 0;
    if let Some(after) = rest.strip_prefix(':') {
        if after.len() < 2 || !after.is_char_boundary(2) {
            return None;
        }
        sec = digits(&after[..2])?;
        rest = &after[2..];
        if let Some(frac) = rest.strip_prefix('.') {
            let n = frac.bytes().take_while(u8::is_ascii_digit).count();
            if n == 0 {
                return None;
            }
            rest = &frac[n..];
        }
    }
    if h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let offset = match rest {
        "" | "Z" | "z" => 0,
        _ => {
            let (sign, off) = match rest.as_bytes().first() {
                Some(b'+') => (1, &rest[1..]),
                Some(b'-') => (-1, &rest[1..]),
                _ => return None,
            };
            if !off.bytes().all(|b| b.is_ascii_digit() || b == b':') {
                return None;
            }
            let (oh, om) = match off.len() {
                5 if off.as_bytes()[2] == b':' => (digits(&off[0..2])?, digits(&off[3..5])?),
                4 => (digits(&off[0..2])?, digits(&off[2..4])?),
                _ => return None,
            };
            if oh > 23 || om > 59 {
                return None;
            }
            sign * (oh * 3600 + om * 60)
        }
    };
    Some(days * 86400 + h * 3600 + mi * 60 + sec - offset)
}

/// Whether a string passes the `date-time` format check of CRD validation: a full date, `T`
/// (either case), `hh:mm:ss`, an optional fraction, and `Z` or a `±hh:mm` offset.
pub(crate) fn is_date_time(s: &str) -> bool {
    let lower = s.to_ascii_lowercase();
    let mut parts = lower.split('t');
    let (Some(date), Some(time)) = (parts.next(), parts.next()) else {
        return false;
    };
    if parse_date(date).is_none() {
        return false;
    }
    let b = time.as_bytes();
    if b.len() < 9 || b[2] != b':' || b[5] != b':' {
        return false;
    }
    let two = |i: usize| -> Option<i64> {
        (b[i].is_ascii_digit() && b[i + 1].is_ascii_digit())
            .then(|| i64::from(b[i] - b'0') * 10 + i64::from(b[i + 1] - b'0'))
    };
    let (Some(h), Some(m), Some(sec)) = (two(0), two(3), two(6)) else {
        return false;
    };
    if h > 23 || m > 59 || sec > 59 {
        return false;
    }
    let mut rest = &b[8..];
    if rest.first() == Some(&b'.') {
        let n = rest[1..].iter().take_while(|c| c.is_ascii_digit()).count();
        if n == 0 {
            return false;
        }
        rest = &rest[1 + n..];
    }
    match rest {
        [b'z'] => true,
        [sign, h1, h2, b':', m1, m2] => {
            matches!(sign, b'+' | b'-') && [h1, h2, m1, m2].iter().all(|c| c.is_ascii_digit())
        }
        _ => false,
    }
}

/// Formats seconds since the epoch as RFC 3339 UTC (`2006-01-02T15:04:05Z`).
pub(crate) fn format_rfc3339(secs: i64) -> String {
    let days = secs.div_euclid(86400);
    let rem = secs.rem_euclid(86400);
    let z = days + 719468;
    let era = if z >= 0 { z } else { z - 146096 } / 146097;
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + if m <= 2 { 1 } else { 0 };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
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
