//! Watch: a chunked stream of newline-delimited JSON frames `{"type","object"}`.
//!
//! `resourceVersion` unset or `0` replays the current objects as ADDED; a given one sends every
//! change after it, in order; one older than the retained history gets an in-stream ERROR 410
//! `Expired`. Bookmarks, `timeoutSeconds` and `sendInitialEvents` are honoured. Each watch runs in
//! its own task fed from its resource's broadcast channel in the store; a watcher that falls too far behind gets
//! ERROR 410 and is closed, so it never slows writers down.

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
        let mut o = crate::event_versions::from_storage(&self.info, obj.clone());
        if let Some(m) = o.as_object_mut() {
            m.insert("apiVersion".into(), json!(self.api_version));
            m.insert("kind".into(), json!(self.kind));
        }
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
            && self.table.is_none()
            && self.info.shared_storage.is_none()
            && obj.get("apiVersion").and_then(Value::as_str) == Some(self.api_version.as_str())
            && obj.get("kind").and_then(Value::as_str) == Some(self.kind.as_str())
        {
            return Some(event.frame(frame_type));
        }
        let o = self.present(obj);
        Some(frame(frame_type.as_str(), &o))
    }

    /// [`Watcher::frame_for`] a stored event (the object before it is looked at only by
    /// watchers with selectors).
    fn frame_for_event(&mut self, e: &Event) -> Option<Bytes> {
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

/// What became of an event passed to a watcher.
enum Delivery {
    /// Sent, or not for this watcher.
    Done,
    /// The client is gone.
    Gone,
}

/// Send a live event to the watcher if it is one for it: only changes after the requested
/// version (one the store has not reached yet included), as a real server's watch cache sends
/// them.
async fn deliver(w: &mut Watcher, e: &Event, group_resource: &str, from_rv: u64) -> Delivery {
    if &*e.group_resource != group_resource || e.rv <= from_rv {
        return Delivery::Done;
    }
    if let Some(f) = w.frame_for_event(e)
        && !w.send(f).await
    {
        return Delivery::Gone;
    }
    Delivery::Done
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
            for obj in objects {
                if let Some(f) = w.frame_for(EventType::Added, &obj, None, None)
                    && !w.send(f).await
                {
                    return;
                }
            }
            if s.send_initial && !w.send(w.bookmark(rv, true)).await {
                return;
            }
        }
        WatchStart::History(events) => {
            progress_rv = s.from_rv;
            for e in events {
                progress_rv = e.rv;
                if let Some(f) = w.frame_for_event(&e)
                    && !w.send(f).await
                {
                    return;
                }
            }
        }
    }
    let deadline = tokio::time::sleep(s.timeout);
    tokio::pin!(deadline);
    let mut ticker = tokio::time::interval(s.bookmark_interval);
    ticker.tick().await;
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
                    match live.try_recv() {
                        Ok(e) => {
                            progress_rv = progress_rv.max(e.rv);
                            if let Delivery::Gone = deliver(&mut w, &e, &group_resource, s.from_rv).await {
                                return;
                            }
                        }
                        Err(broadcast::error::TryRecvError::Empty) => break,
                        Err(broadcast::error::TryRecvError::Lagged(n)) => {
                            w.expired(format!("the watcher fell {n} events behind and was dropped; resume with a new list")).await;
                            return;
                        }
                        Err(broadcast::error::TryRecvError::Closed) => return,
                    }
                }
                progress_rv = progress_rv.max(store_rv);
                if progress_rv > 0 && !w.send(w.bookmark(progress_rv, false)).await {
                    return;
                }
            }
            msg = live.recv() => match msg {
                Ok(e) => {
                    progress_rv = progress_rv.max(e.rv);
                    if let Delivery::Gone = deliver(&mut w, &e, &group_resource, s.from_rv).await {
                        return;
                    }
                }
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    w.expired(format!("the watcher fell {n} events behind and was dropped; resume with a new list")).await;
                    return;
                }
                Err(broadcast::error::RecvError::Closed) => return,
            }
        }
    }
}
