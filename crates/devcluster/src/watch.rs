//! Watch: a chunked stream of newline-delimited JSON frames `{"type","object"}`.
//!
//! `resourceVersion` unset or `0` replays the current objects as ADDED; a given one sends every
//! change after it, in order; one older than the retained history gets an in-stream ERROR 410
//! `Expired`. Bookmarks, `timeoutSeconds` and `sendInitialEvents` are honoured. Each watch runs in
//! its own task fed from its resource's broadcast channel in the store; a watcher that falls too far behind gets
//! ERROR 410 and is closed, so it never slows writers down. Frames ready together (events
//! waiting in the channel when the task runs, a replay, a resume from history) go out as one
//! body chunk of up to [`BATCH_EVENTS`] frames.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use http::{StatusCode, header};
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};

use crate::api_error::ApiError;
use crate::list_filter::ListFilter;
use crate::meta;
use crate::server::{ResourceRequest, SharedState};
use crate::store::{Event, EventType, WatchStart};

/// Default watch length when the client gives no `timeoutSeconds` (a real server picks 30-60 min).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1800);

/// A watch answered with `meta.k8s.io/v1` Table objects (kubectl `get -w`).
struct TableMode {
    columns: Vec<crate::schema::table::Column>,
    include: crate::schema::table::IncludeObject,
    header_sent: bool,
}

struct Watcher {
    table: Option<TableMode>,
    info: Arc<crate::registry::ResourceInfo>,
    api_version: String,
    kind: String,
    namespace: Option<String>,
    filter: ListFilter,
    has_selectors: bool,
    tx: mpsc::Sender<Bytes>,
}

fn frame(type_: &str, object: &Value) -> Bytes {
    let mut v = serde_json::to_vec(&json!({"type": type_, "object": object})).unwrap_or_default();
    v.push(b'\n');
    Bytes::from(v)
}

impl Watcher {
    fn present(&mut self, obj: &Value) -> Value {
        let o = crate::rest::present_as(&self.info, obj, &self.api_version);
        let Some(t) = &mut self.table else { return o };
        let now = jiff::Timestamp::now().as_second();
        let rv = json!({"resourceVersion": meta::meta_str(&o, "resourceVersion").unwrap_or("")});
        let rendered = if t.header_sent {
            crate::schema::table::render_without_headers(&t.columns, &[o], t.include, rv, now)
        } else {
            crate::schema::table::render(&t.columns, &[o], t.include, rv, now)
        };
        t.header_sent = true;
        rendered
    }

    fn visible(&self, obj: &Value) -> bool {
        self.namespace
            .as_deref()
            .is_none_or(|ns| meta::meta_str(obj, "namespace") == Some(ns))
            && self.filter.matches(obj)
    }

    /// The frame (if any) this watcher sends for a change. With selectors, an object moving into
    /// the selection is ADDED and one moving out is DELETED, as on a real server.
    fn frame_for(
        &mut self,
        event_type: EventType,
        obj: &Value,
        previous: Option<&Value>,
        event: Option<&Event>,
    ) -> Option<Bytes> {
        let now = self.visible(obj);
        let frame_type = if !self.has_selectors {
            if !now {
                return None;
            }
            event_type
        } else {
            let was = previous.is_some_and(|p| self.visible(p));
            match (event_type, was, now) {
                (EventType::Added, _, true) => EventType::Added,
                (EventType::Deleted, true, _) => EventType::Deleted,
                (EventType::Deleted, false, true) => EventType::Deleted,
                (EventType::Modified, false, true) => EventType::Added,
                (EventType::Modified, true, true) => EventType::Modified,
                (EventType::Modified, true, false) => EventType::Deleted,
                _ => return None,
            }
        };
        // Watchers at the stored version share one frame of the object per frame type.
        if let Some(event) = event
            && self.sends_stored_form()
            && obj.get("apiVersion").and_then(Value::as_str) == Some(self.api_version.as_str())
            && obj.get("kind").and_then(Value::as_str) == Some(self.kind.as_str())
        {
            return Some(event.frame(frame_type));
        }
        let o = self.present(obj);
        Some(frame(frame_type.as_str(), &o))
    }

    /// Whether this watcher sends objects as stored (no table, no other version to convert to),
    /// so that it can send an event's shared frame when the object's type matches its own.
    fn sends_stored_form(&self) -> bool {
        self.table.is_none() && self.info.shared_storage.is_none()
    }

    /// [`Watcher::frame_for`] a stored event (the object before it is looked at only by
    /// watchers with selectors).
    fn frame_for_event(&mut self, e: &Event) -> Option<Bytes> {
        // A watch of every object in the stored form sends each event's own shared frame: only
        // the object's type is looked at, without parsing an old event's object again.
        if !self.has_selectors
            && self.filter.is_empty()
            && self.namespace.is_none()
            && self.sends_stored_form()
            && e.has_type(&self.api_version, &self.kind)
        {
            return Some(e.frame(e.event_type));
        }
        let obj = e.object();
        let previous = if self.has_selectors {
            e.previous()
        } else {
            None
        };
        self.frame_for(e.event_type, &obj, previous.as_deref(), Some(e))
    }

    fn bookmark(&self, rv: u64, initial_end: bool) -> Bytes {
        let mut metadata = json!({"resourceVersion": rv.to_string()});
        if initial_end {
            metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        frame(
            "BOOKMARK",
            &json!({"apiVersion": self.api_version, "kind": self.kind, "metadata": metadata}),
        )
    }

    async fn send(&self, b: Bytes) -> bool {
        self.tx.send(b).await.is_ok()
    }

    async fn expired(&self, message: String) {
        let status = ApiError::expired(message).to_status();
        let _ = self.tx.send(frame("ERROR", &status)).await;
    }
}

pub fn serve(state: &SharedState, req: ResourceRequest) -> Result<Response, ApiError> {
    let filter = ListFilter::from_query(&req.info, &req.query)?;
    let has_selectors =
        req.query.get("labelSelector").is_some() || req.query.get("fieldSelector").is_some();
    let from_rv = match req.query.get("resourceVersion") {
        None | Some("0") => None,
        Some(s) => Some(
            s.parse::<u64>()
                .map_err(|_| ApiError::bad_request(format!("invalid resource version: {s:?}")))?,
        ),
    };
    let send_initial = req.query.flag("sendInitialEvents");
    let from_rv = if send_initial { None } else { from_rv };
    let bookmarks = req.query.flag("allowWatchBookmarks");
    let timeout = req
        .query
        .get("timeoutSeconds")
        .and_then(|s| s.parse::<u64>().ok())
        .map(Duration::from_secs)
        .unwrap_or(DEFAULT_TIMEOUT);
    let (tx, rx) = mpsc::channel::<Bytes>(256);
    let table = if crate::rest::wants_table(req.accept()) {
        let (columns, include) = crate::table_glue::columns_for(&req)?;
        Some(TableMode {
            columns,
            include,
            header_sent: false,
        })
    } else {
        None
    };
    let watcher = Watcher {
        table,
        info: req.info.clone(),
        api_version: req.api_version(),
        kind: req.info.kind.clone(),
        namespace: req.namespace.clone(),
        filter,
        has_selectors,
        tx,
    };
    let (start, live) =
        state
            .store
            .watch(&req.info.storage_key(), req.namespace.as_deref(), from_rv);
    let group_resource: Arc<str> = Arc::from(req.info.storage_key().as_str());
    let options = state.options.clone();
    tokio::spawn(run(
        watcher,
        start,
        live,
        group_resource,
        WatchSettings {
            from_rv: from_rv.unwrap_or(0),
            send_initial,
            bookmarks,
            timeout,
            bookmark_interval: options.bookmark_interval,
            shutdown: state.shutdown.clone(),
            state: state.clone(),
        },
    ));
    let body = Body::from_stream(futures::StreamExt::map(
        tokio_stream::wrappers::ReceiverStream::new(rx),
        Ok::<Bytes, std::io::Error>,
    ));
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CACHE_CONTROL, "no-cache, private")
        .body(body)
        .map_err(|e| ApiError::internal(e.to_string()))
}

struct WatchSettings {
    /// The resourceVersion the client resumes from (0 for a replay).
    from_rv: u64,
    send_initial: bool,
    bookmarks: bool,
    timeout: Duration,
    bookmark_interval: Duration,
    shutdown: tokio_util::sync::CancellationToken,
    /// For the store's current resourceVersion (bookmarks).
    state: SharedState,
}

/// Most events whose frames go out in one chunk (a burst longer than this is sent in several).
const BATCH_EVENTS: usize = 64;

/// Frames ready together, sent to the client as one body chunk: one wake-up of the connection
/// and one socket write for a burst of events instead of one per event.
#[derive(Default)]
struct Batch {
    frames: Vec<Bytes>,
}

impl Batch {
    /// Adds the frame of a live event if it is one for the watcher: only changes after the
    /// requested version (one the store has not reached yet included), as a real server's watch
    /// cache sends them.
    fn add_event(&mut self, w: &mut Watcher, e: &Event, group_resource: &str, from_rv: u64) {
        if &*e.group_resource != group_resource || e.rv <= from_rv {
            return;
        }
        if let Some(f) = w.frame_for_event(e) {
            self.frames.push(f);
        }
    }

    /// The frames joined in order (the frame itself when there is one, without a copy).
    fn take_chunk(&mut self) -> Option<Bytes> {
        match self.frames.len() {
            0 => None,
            1 => self.frames.pop(),
            _ => {
                let len = self.frames.iter().map(Bytes::len).sum();
                let mut out = bytes::BytesMut::with_capacity(len);
                for f in self.frames.drain(..) {
                    out.extend_from_slice(&f);
                }
                Some(out.freeze())
            }
        }
    }

    /// Sends what was gathered; false when the client is gone.
    async fn flush(&mut self, w: &Watcher) -> bool {
        match self.take_chunk() {
            Some(chunk) => w.send(chunk).await,
            None => true,
        }
    }
}

/// What ended a drain of the live channel.
enum Drained {
    /// Nothing more is ready.
    Empty,
    /// The watcher fell behind by this many events.
    Lagged(u64),
    /// The store is gone.
    Closed,
}

/// Gathers the events already waiting in the live channel (at most `limit`) into `batch`.
fn drain_ready(
    live: &mut broadcast::Receiver<Arc<Event>>,
    w: &mut Watcher,
    batch: &mut Batch,
    group_resource: &str,
    from_rv: u64,
    progress_rv: &mut u64,
    limit: usize,
) -> Drained {
    for _ in 0..limit {
        match live.try_recv() {
            Ok(e) => {
                *progress_rv = (*progress_rv).max(e.rv);
                batch.add_event(w, &e, group_resource, from_rv);
            }
            Err(broadcast::error::TryRecvError::Empty) => return Drained::Empty,
            Err(broadcast::error::TryRecvError::Lagged(n)) => return Drained::Lagged(n),
            Err(broadcast::error::TryRecvError::Closed) => return Drained::Closed,
        }
    }
    Drained::Empty
}

fn lagged_message(n: u64) -> String {
    format!("the watcher fell {n} events behind and was dropped; resume with a new list")
}

async fn run(
    mut w: Watcher,
    start: WatchStart,
    mut live: broadcast::Receiver<Arc<Event>>,
    group_resource: Arc<str>,
    s: WatchSettings,
) {
    let mut progress_rv: u64;
    match start {
        WatchStart::Expired { oldest } => {
            w.expired(format!(
                "too old resource version: requested is older than the oldest retained ({oldest})"
            ))
            .await;
            return;
        }
        WatchStart::Replay(objects, rv) => {
            progress_rv = rv;
            let mut batch = Batch::default();
            for obj in objects {
                if let Some(f) = w.frame_for(EventType::Added, &obj, None, None) {
                    batch.frames.push(f);
                }
                if batch.frames.len() >= BATCH_EVENTS && !batch.flush(&w).await {
                    return;
                }
            }
            if !batch.flush(&w).await {
                return;
            }
            if s.send_initial && !w.send(w.bookmark(rv, true)).await {
                return;
            }
        }
        WatchStart::History(events) => {
            progress_rv = s.from_rv;
            let mut batch = Batch::default();
            for e in events {
                progress_rv = e.rv;
                if let Some(f) = w.frame_for_event(&e) {
                    batch.frames.push(f);
                }
                if batch.frames.len() >= BATCH_EVENTS && !batch.flush(&w).await {
                    return;
                }
            }
            if !batch.flush(&w).await {
                return;
            }
        }
    }
    let deadline = tokio::time::sleep(s.timeout);
    tokio::pin!(deadline);
    let mut ticker = tokio::time::interval(s.bookmark_interval);
    ticker.tick().await;
    let mut batch = Batch::default();
    loop {
        tokio::select! {
            _ = &mut deadline => return,
            _ = s.shutdown.cancelled() => return,
            _ = w.tx.closed() => return,
            _ = ticker.tick() => {
                if !s.bookmarks {
                    continue;
                }
                // The channel carries only this resource's events: the bookmark gives the
                // store's version, once every event of this resource up to it (all in the
                // channel by now) has gone out.
                let store_rv = s.state.store.current_rv();
                loop {
                    let drained = drain_ready(&mut live, &mut w, &mut batch, &group_resource, s.from_rv, &mut progress_rv, BATCH_EVENTS);
                    if !batch.flush(&w).await {
                        return;
                    }
                    match drained {
                        Drained::Empty if live.is_empty() => break,
                        Drained::Empty => {}
                        Drained::Lagged(n) => {
                            w.expired(lagged_message(n)).await;
                            return;
                        }
                        Drained::Closed => return,
                    }
                }
                progress_rv = progress_rv.max(store_rv);
                if progress_rv > 0 && !w.send(w.bookmark(progress_rv, false)).await {
                    return;
                }
            }
            msg = live.recv() => {
                let drained = match msg {
                    Ok(e) => {
                        progress_rv = progress_rv.max(e.rv);
                        batch.add_event(&mut w, &e, &group_resource, s.from_rv);
                        // Events committed together (or while this task waited to run) go
                        // out in the same chunk.
                        drain_ready(&mut live, &mut w, &mut batch, &group_resource, s.from_rv, &mut progress_rv, BATCH_EVENTS - 1)
                    }
                    Err(broadcast::error::RecvError::Lagged(n)) => Drained::Lagged(n),
                    Err(broadcast::error::RecvError::Closed) => Drained::Closed,
                };
                if !batch.flush(&w).await {
                    return;
                }
                match drained {
                    Drained::Empty => {}
                    Drained::Lagged(n) => {
                        w.expired(lagged_message(n)).await;
                        return;
                    }
                    Drained::Closed => return,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_joins_its_frames_in_order_and_passes_a_single_frame_through() {
        let mut batch = Batch::default();
        assert!(
            batch.take_chunk().is_none(),
            "nothing gathered, nothing sent"
        );

        let only = Bytes::from_static(b"{\"type\":\"ADDED\",\"object\":{}}\n");
        batch.frames.push(only.clone());
        let chunk = batch.take_chunk().expect("one frame");
        assert_eq!(chunk.as_ptr(), only.as_ptr(), "a lone frame is not copied");

        let frames: Vec<Bytes> = (0..BATCH_EVENTS)
            .map(|i| Bytes::from(format!("{{\"n\":{i}}}\n")))
            .collect();
        batch.frames.extend(frames.iter().cloned());
        let chunk = batch.take_chunk().expect("many frames");
        assert_eq!(chunk, frames.concat(), "every frame once, in order");
        assert!(batch.frames.is_empty(), "the batch starts over empty");
        assert!(batch.take_chunk().is_none());
    }
}
