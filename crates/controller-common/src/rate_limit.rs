//! Client-side rate limiting of Kubernetes API requests, as client-go's QPS/burst.
//!
//! A token bucket holds up to `burst` tokens and refills at `qps` tokens per second; every
//! request takes one token and waits when none is left. The limiter is a tower [`Layer`] placed
//! in the kube client's service stack, so watches and writes alike are paced, as in client-go.
//!
//! Hand-written rather than `governor`: the bucket is a dozen lines, it waits on tokio's clock
//! (so tests drive it deterministically with paused time and count requests instead of timing
//! them), and it needs no extra timer or clock dependency.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use tokio::time::{Duration, Instant, Sleep};
use tower::{Layer, Service};

/// QPS used when the flag says 0, as client-go's `rest.DefaultQPS`.
pub const DEFAULT_QPS_WHEN_ZERO: f64 = 5.0;

/// The rate limit a client should apply, derived from `--kube-api-qps` and `--kube-api-burst`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RateLimit {
    /// No client-side limit (negative QPS).
    Unlimited,
    /// A token bucket.
    TokenBucket {
        /// Sustained requests per second (> 0).
        qps: f64,
        /// Requests that may be sent at once after an idle period (>= 1).
        burst: u32,
    },
}

impl RateLimit {
    /// Maps the flag values: negative QPS disables limiting, 0 means client-go's default of 5,
    /// a burst of 0 is raised to 1 (the flag parser already rejects it).
    pub fn from_flags(qps: f64, burst: u32) -> RateLimit {
        if qps < 0.0 || !qps.is_finite() {
            return RateLimit::Unlimited;
        }
        let qps = if qps == 0.0 {
            DEFAULT_QPS_WHEN_ZERO
        } else {
            qps
        };
        RateLimit::TokenBucket {
            qps,
            burst: burst.max(1),
        }
    }
}

/// The bucket itself: pure arithmetic over instants.
#[derive(Debug)]
struct TokenBucket {
    qps: f64,
    burst: f64,
    tokens: f64,
    last_refill: Instant,
}

impl TokenBucket {
    fn new(qps: f64, burst: u32, now: Instant) -> Self {
        TokenBucket {
            qps,
            burst: f64::from(burst),
            tokens: f64::from(burst),
            last_refill: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now
            .saturating_duration_since(self.last_refill)
            .as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.qps).min(self.burst);
        self.last_refill = now;
    }

    /// Takes a token, or says when the next one will be available.
    fn try_take(&mut self, now: Instant) -> Result<(), Instant> {
        self.refill(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            let missing = 1.0 - self.tokens;
            let wait = Duration::from_secs_f64(missing / self.qps);
            // Never ask to be woken in the past (float rounding) or not at all.
            Err(now + wait.max(Duration::from_micros(1)))
        }
    }
}

/// Tower layer applying a [`RateLimit`] to every request.
#[derive(Debug, Clone)]
pub struct RateLimitLayer {
    limit: RateLimit,
}

impl RateLimitLayer {
    /// A layer for `limit`.
    pub fn new(limit: RateLimit) -> Self {
        RateLimitLayer { limit }
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimited<S>;

    fn layer(&self, inner: S) -> Self::Service {
        let bucket =
            match self.limit {
                RateLimit::Unlimited => None,
                RateLimit::TokenBucket { qps, burst } => Some(Arc::new(Mutex::new(
                    TokenBucket::new(qps, burst, Instant::now()),
                ))),
            };
        RateLimited {
            inner,
            bucket,
            sleep: None,
            has_token: false,
        }
    }
}

/// A service that takes a token before each request (see [`RateLimitLayer`]). Clones share
/// one bucket.
pub struct RateLimited<S> {
    inner: S,
    bucket: Option<Arc<Mutex<TokenBucket>>>,
    sleep: Option<Pin<Box<Sleep>>>,
    has_token: bool,
}

impl<S: Clone> Clone for RateLimited<S> {
    fn clone(&self) -> Self {
        RateLimited {
            inner: self.inner.clone(),
            bucket: self.bucket.clone(),
            sleep: None,
            has_token: false,
        }
    }
}

impl<S, Req> Service<Req> for RateLimited<S>
where
    S: Service<Req>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        if let Some(bucket) = &self.bucket {
            while !self.has_token {
                if let Some(sleep) = self.sleep.as_mut() {
                    if sleep.as_mut().poll(cx).is_pending() {
                        return Poll::Pending;
                    }
                    self.sleep = None;
                }
                // A poisoned lock only means another clone panicked mid-arithmetic; the
                // numbers are still usable.
                let taken = bucket
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
                    .try_take(Instant::now());
                match taken {
                    Ok(()) => self.has_token = true,
                    Err(at) => self.sleep = Some(Box::pin(tokio::time::sleep_until(at))),
                }
            }
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        self.has_token = false;
        self.inner.call(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tower::ServiceExt;

    #[test]
    fn flags_map_like_client_go() {
        assert_eq!(RateLimit::from_flags(-1.0, 10), RateLimit::Unlimited);
        assert_eq!(
            RateLimit::from_flags(0.0, 10),
            RateLimit::TokenBucket {
                qps: 5.0,
                burst: 10
            }
        );
        assert_eq!(
            RateLimit::from_flags(1000.0, 0),
            RateLimit::TokenBucket {
                qps: 1000.0,
                burst: 1
            }
        );
    }

    /// Spawns `n` requests through one limited service (as kube's client does, behind one
    /// buffer) and returns the counter of requests that reached the inner service.
    fn spawn_requests(limit: RateLimit, n: usize) -> Arc<AtomicUsize> {
        let served = Arc::new(AtomicUsize::new(0));
        let counter = served.clone();
        let inner = tower::service_fn(move |_req: ()| {
            counter.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, Infallible>(()) }
        });
        let mut svc = RateLimitLayer::new(limit).layer(inner);
        tokio::spawn(async move {
            for _ in 0..n {
                let ready = svc.ready().await.unwrap();
                ready.call(()).await.unwrap();
            }
        });
        served
    }

    async fn settle() {
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn burst_passes_at_once_then_qps_paces() {
        let served = spawn_requests(
            RateLimit::TokenBucket {
                qps: 10.0,
                burst: 5,
            },
            30,
        );
        settle().await;
        assert_eq!(
            served.load(Ordering::SeqCst),
            5,
            "burst goes through immediately"
        );

        // Time moves in 100 ms steps, as it would while requests keep coming.
        for _ in 0..10 {
            tokio::time::advance(Duration::from_millis(100)).await;
            settle().await;
        }
        assert_eq!(
            served.load(Ordering::SeqCst),
            15,
            "one second adds qps tokens"
        );

        for _ in 0..5 {
            tokio::time::advance(Duration::from_millis(100)).await;
            settle().await;
        }
        assert_eq!(served.load(Ordering::SeqCst), 20);

        // A long pause refills at most `burst` tokens: 5 at once, not 10 per second idle.
        tokio::time::advance(Duration::from_secs(60)).await;
        settle().await;
        assert_eq!(served.load(Ordering::SeqCst), 25);
    }

    #[test]
    fn bucket_never_exceeds_burst_after_idle() {
        let start = Instant::now();
        let mut bucket = TokenBucket::new(100.0, 3, start);
        for _ in 0..3 {
            bucket.try_take(start).unwrap();
        }
        let later = start + Duration::from_secs(60);
        let mut taken = 0;
        while bucket.try_take(later).is_ok() {
            taken += 1;
        }
        assert_eq!(taken, 3);
        let next = bucket.try_take(later).unwrap_err();
        assert_eq!(next - later, Duration::from_millis(10));
    }

    #[tokio::test(start_paused = true)]
    async fn unlimited_lets_everything_through() {
        let served = spawn_requests(RateLimit::Unlimited, 1000);
        settle().await;
        for _ in 0..100 {
            if served.load(Ordering::SeqCst) == 1000 {
                break;
            }
            settle().await;
        }
        assert_eq!(served.load(Ordering::SeqCst), 1000);
    }

    /// The layer inside a real kube `Client` (which puts its service behind a buffer): only
    /// `burst` API calls reach the server at once, the rest follow at `qps`.
    #[tokio::test(start_paused = true)]
    async fn kube_client_calls_are_paced() {
        use k8s_openapi::api::coordination::v1::Lease;
        let served = Arc::new(AtomicUsize::new(0));
        let counter = served.clone();
        let server = tower::service_fn(move |_req: http::Request<kube::client::Body>| {
            counter.fetch_add(1, Ordering::SeqCst);
            async {
                let body = r#"{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}"#;
                Ok::<_, Infallible>(
                    http::Response::builder()
                        .status(404)
                        .body(kube::client::Body::from(body.as_bytes().to_vec()))
                        .unwrap(),
                )
            }
        });
        let client = kube::client::ClientBuilder::new(server, "default")
            .with_layer(&RateLimitLayer::new(RateLimit::TokenBucket {
                qps: 2.0,
                burst: 3,
            }))
            .build();
        let api: kube::Api<Lease> = kube::Api::default_namespaced(client);
        for i in 0..8 {
            let api = api.clone();
            tokio::spawn(async move { api.get_opt(&format!("lease-{i}")).await });
        }
        settle().await;
        assert_eq!(served.load(Ordering::SeqCst), 3, "burst");
        for _ in 0..10 {
            tokio::time::advance(Duration::from_millis(100)).await;
            settle().await;
        }
        assert_eq!(
            served.load(Ordering::SeqCst),
            5,
            "two more after one second at 2 qps"
        );
    }
}
