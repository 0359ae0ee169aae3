//! Span and trace ids derived from an object's identity, so a span that covers several
//! reconciles (and process restarts) has one id every pass can name as its parent before the
//! span itself is emitted.
//!
//! The SDK always draws span ids from the provider's id generator; [`OverridableIds`] is that
//! generator: random ids, except inside [`with_ids`], where the next ids come from the caller.

use std::cell::Cell;

use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator};

/// A 128-bit FNV-1a hash of `seed` with `domain` mixed in first (stable across processes,
/// releases and platforms, unlike `std`'s hasher).
fn fnv1a_128(domain: &str, seed: &str) -> u128 {
    const OFFSET: u128 = 0x6c62272e07bb014262b821756295c58d;
    const PRIME: u128 = 0x0000000001000000000000000000013B;
    let mut hash = OFFSET;
    for byte in domain.bytes().chain([0u8]).chain(seed.bytes()) {
        hash ^= u128::from(byte);
        hash = hash.wrapping_mul(PRIME);
    }
    hash
}

/// The trace id a trace rooted at `seed` (e.g. a claim UID) gets: stable, never invalid.
pub fn derived_trace_id(seed: &str) -> TraceId {
    TraceId::from(fnv1a_128("trace", seed).max(1))
}

/// The span id of the span `name` of `seed` (e.g. `claim-to-bound` of a claim UID): stable,
/// never invalid.
pub fn derived_span_id(name: &str, seed: &str) -> SpanId {
    let hash = fnv1a_128(name, seed);
    // Fold the 128 bits into 64; both halves depend on every input byte.
    let folded = (hash as u64) ^ ((hash >> 64) as u64);
    SpanId::from(folded.max(1))
}

/// A remote, sampled parent context naming span `span_id` of trace `trace_id`, for spans that
/// belong under a span emitted later (with that id, through [`with_ids`]).
pub fn remote_parent(trace_id: TraceId, span_id: SpanId, sampled: bool) -> opentelemetry::Context {
    let flags = if sampled {
        TraceFlags::SAMPLED
    } else {
        TraceFlags::default()
    };
    opentelemetry::Context::new().with_remote_span_context(SpanContext::new(
        trace_id,
        span_id,
        flags,
        true,
        TraceState::default(),
    ))
}

thread_local! {
    static NEXT_TRACE_ID: Cell<Option<TraceId>> = const { Cell::new(None) };
    static NEXT_SPAN_ID: Cell<Option<SpanId>> = const { Cell::new(None) };
}

/// Runs `f` (which starts one span, synchronously) so that the span gets `span_id`, and, if it
/// is a root, `trace_id`. Only effective with [`OverridableIds`] installed (it is, when
/// [`super::init`] exports traces).
pub fn with_ids<T>(trace_id: Option<TraceId>, span_id: SpanId, f: impl FnOnce() -> T) -> T {
    NEXT_TRACE_ID.with(|c| c.set(trace_id));
    NEXT_SPAN_ID.with(|c| c.set(Some(span_id)));
    let out = f();
    NEXT_TRACE_ID.with(|c| c.set(None));
    NEXT_SPAN_ID.with(|c| c.set(None));
    out
}

/// Random ids, except the ones [`with_ids`] hands out (each once).
#[derive(Debug, Default)]
pub struct OverridableIds {
    random: RandomIdGenerator,
}

impl IdGenerator for OverridableIds {
    fn new_trace_id(&self) -> TraceId {
        NEXT_TRACE_ID
            .with(Cell::take)
            .unwrap_or_else(|| self.random.new_trace_id())
    }

    fn new_span_id(&self) -> SpanId {
        NEXT_SPAN_ID
            .with(Cell::take)
            .unwrap_or_else(|| self.random.new_span_id())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::{Span as _, Tracer, TracerProvider as _};
    use opentelemetry_sdk::trace::SdkTracerProvider;

    #[test]
    fn derived_ids_are_stable_distinct_and_valid() {
        let uid = "6b1d7e1c-3f0a-4a39-9a55-0d7a3f1b2c4d";
        assert_eq!(derived_trace_id(uid), derived_trace_id(uid));
        assert_ne!(derived_trace_id(uid), derived_trace_id("other"));
        assert_ne!(
            derived_span_id("claim-to-bound", uid),
            derived_span_id("waitForSandboxReady", uid)
        );
        assert_ne!(derived_trace_id(""), TraceId::INVALID);
        assert_ne!(derived_span_id("", ""), SpanId::INVALID);
        // Pinned: a release changing these would orphan the spans of claims in flight.
        assert_eq!(
            format!("{:032x}", fnv1a_128("", "")),
            "d228cb69101a8caf78912b704e4a147f"
        );
    }

    #[test]
    fn with_ids_names_the_next_span_only() {
        let provider = SdkTracerProvider::builder()
            .with_id_generator(OverridableIds::default())
            .build();
        let tracer = provider.tracer("test");
        let trace = derived_trace_id("claim-uid");
        let id = derived_span_id("claim-to-bound", "claim-uid");
        let span = with_ids(Some(trace), id, || tracer.start("claim-to-bound"));
        assert_eq!(span.span_context().span_id(), id);
        assert_eq!(span.span_context().trace_id(), trace);
        let next = tracer.start("other");
        assert_ne!(next.span_context().span_id(), id);

        // A child started under a remote parent with the same ids joins the span.
        let parent = remote_parent(trace, id, true);
        let child = tracer.start_with_context("ReconcileSandboxClaim", &parent);
        assert_eq!(child.span_context().trace_id(), trace);
        assert!(parent.span().span_context().is_remote());
    }
}
