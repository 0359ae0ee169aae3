//! No trigger is lost by the whole path a change takes to a pass: a watch (with gaps and
//! relists) into [`shared_watch`], the echo filter of [`OwnWrites`], and the [`Runner`], under
//! many interleavings of other writers' changes, the controller's own writes, deletions,
//! failures and pass durations (issue 21 items 1 and 9). Paused time: every run is
//! deterministic for its seed.
//!
//! The model: a server holds ConfigMaps whose `ext` value other writers change; a pass reads
//! the cached object, sometimes writes `seen` back (a merge patch: the server's `ext` stays),
//! records its write for echo suppression and acts on the server's answer, as the controllers'
//! passes do. The property: once the writers stop, every live object's last `ext` has been seen
//! by a pass, and no key ran twice at once.

use std::collections::{BTreeMap, HashSet};
use std::sync::Mutex;

use futures::channel::mpsc;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::watcher;
use prometheus_client::registry::Registry;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::shared_watch::shared_watch;
use super::*;
use crate::own_writes::OwnWrites;
use crate::work_queue::WorkQueueMetrics;

type Event = Result<watcher::Event<ConfigMap>, watcher::Error>;

/// The API server of the model.
struct Server {
    objects: BTreeMap<String, ConfigMap>,
    last_rv: u64,
    uids: u64,
    watch: mpsc::UnboundedSender<Event>,
    /// The watch is down: changes are not delivered until the relist.
    broken: bool,
}

fn ext_of(cm: &ConfigMap) -> u64 {
    cm.data
        .as_ref()
        .and_then(|d| d.get("ext"))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

impl Server {
    fn send(&self, event: watcher::Event<ConfigMap>) {
        if !self.broken {
            let _ = self.watch.unbounded_send(Ok(event));
        }
    }

    /// Another writer creates the object or changes its `ext`.
    fn external_change(&mut self, name: &str) {
        self.last_rv += 1;
        let rv = self.last_rv.to_string();
        let obj = match self.objects.get_mut(name) {
            Some(obj) => {
                let ext = ext_of(obj) + 1;
                obj.data
                    .get_or_insert_default()
                    .insert("ext".into(), ext.to_string());
                obj.metadata.resource_version = Some(rv);
                obj.clone()
            }
            None => {
                self.uids += 1;
                let mut obj = ConfigMap::default();
                obj.metadata.name = Some(name.into());
                obj.metadata.namespace = Some("ns".into());
                obj.metadata.uid = Some(format!("uid-{}", self.uids));
                obj.metadata.resource_version = Some(rv);
                obj.data = Some([("ext".to_owned(), "1".to_owned())].into());
                self.objects.insert(name.into(), obj.clone());
                obj
            }
        };
        self.send(watcher::Event::Apply(obj));
    }

    fn delete(&mut self, name: &str) {
        if let Some(obj) = self.objects.remove(name) {
            self.last_rv += 1;
            self.send(watcher::Event::Delete(obj));
        }
    }

    /// The controller's merge patch of `seen`: the answer is the object as stored.
    fn controller_write(&mut self, uid: &str, seen: u64) -> Option<ConfigMap> {
        let obj = self
            .objects
            .values_mut()
            .find(|o| o.metadata.uid.as_deref() == Some(uid))?;
        self.last_rv += 1;
        obj.data
            .get_or_insert_default()
            .insert("seen".into(), seen.to_string());
        obj.metadata.resource_version = Some(self.last_rv.to_string());
        let obj = obj.clone();
        self.send(watcher::Event::Apply(obj.clone()));
        Some(obj)
    }

    fn break_watch(&mut self) {
        self.broken = true;
    }

    /// The watcher's relist after a `410 Gone`: the objects as they are now.
    fn relist(&mut self) {
        self.broken = false;
        self.send(watcher::Event::Init);
        for obj in self.objects.values() {
            self.send(watcher::Event::InitApply(obj.clone()));
        }
        self.send(watcher::Event::InitDone);
    }
}

/// What the passes did.
#[derive(Default)]
struct Seen {
    /// The highest `ext` a pass saw per object uid (from the cache or its write's answer).
    ext: BTreeMap<String, u64>,
    running: HashSet<String>,
    overlaps: usize,
    passes: usize,
}

async fn run_seed(seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let (tx, rx) = mpsc::unbounded::<Event>();
    let server = Arc::new(Mutex::new(Server {
        objects: BTreeMap::new(),
        last_rv: 0,
        uids: 0,
        watch: tx,
        broken: false,
    }));
    server.lock().unwrap().relist();
    let (store, driver, mut subs) = shared_watch(rx, 1);
    tokio::spawn(driver);
    let own = Arc::new(OwnWrites::new());
    let echoes = own.clone();
    // Merged with another trigger stream as the controllers merge theirs (`select_all`, which
    // polls a stream only when that stream's own waker fires).
    let (nudge, nudges) = mpsc::unbounded::<ObjectRef<ConfigMap>>();
    let triggers = futures::stream::select_all([
        subs.remove(0)
            .filter(move |obj| futures::future::ready(!echoes.is_echo(obj.meta())))
            .map(|obj| ObjectRef::from_obj(obj.as_ref()))
            .boxed(),
        nudges.boxed(),
    ]);
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let shutdown = CancellationToken::new();
    let queue = WorkQueueMetrics::register(&mut Registry::default()).queue("model");
    let pass_rng = Arc::new(Mutex::new(StdRng::seed_from_u64(seed ^ 0x5eed)));
    let (pass_server, pass_seen, pass_own) = (server.clone(), seen.clone(), own.clone());
    let runner = Runner::<ConfigMap>::new(2, queue).run(
        store,
        triggers,
        move |obj: Arc<ConfigMap>, _: Arc<()>| {
            let (server, seen, own, rng) = (
                pass_server.clone(),
                pass_seen.clone(),
                pass_own.clone(),
                pass_rng.clone(),
            );
            async move {
                let uid = obj.metadata.uid.clone().unwrap_or_default();
                let ext = ext_of(&obj);
                {
                    let mut seen = seen.lock().unwrap();
                    seen.passes += 1;
                    if !seen.running.insert(uid.clone()) {
                        seen.overlaps += 1;
                    }
                    let best = seen.ext.entry(uid.clone()).or_default();
                    *best = (*best).max(ext);
                }
                let (took, writes, fails) = {
                    let mut rng = rng.lock().unwrap();
                    (
                        Duration::from_millis(rng.random_range(0..30)),
                        rng.random_bool(0.5),
                        rng.random_bool(0.1),
                    )
                };
                tokio::time::sleep(took).await;
                let answer = if writes {
                    server.lock().unwrap().controller_write(&uid, ext)
                } else {
                    None
                };
                let mut seen = seen.lock().unwrap();
                if let Some(answer) = answer {
                    own.record(&answer.metadata);
                    // The pass acts on the server's answer.
                    let best = seen.ext.entry(uid.clone()).or_default();
                    *best = (*best).max(ext_of(&answer));
                }
                seen.running.remove(&uid);
                if fails {
                    Err("injected failure".to_owned())
                } else {
                    Ok(Action::await_change())
                }
            }
        },
        |_, _: &String, _| Action::requeue(Duration::from_millis(30)),
        Arc::new(()),
        shutdown.clone(),
    );
    let runner = tokio::spawn(runner);

    for _ in 0..120 {
        let name = format!("o{}", rng.random_range(0..8));
        {
            let mut server = server.lock().unwrap();
            match rng.random_range(0..20) {
                0..=13 => server.external_change(&name),
                14..=15 => server.delete(&name),
                16 => server.break_watch(),
                17 if server.broken => server.relist(),
                // A trigger from elsewhere (an owned object's event, a timer).
                18 => {
                    let _ = nudge.unbounded_send(ObjectRef::new(&name).within("ns"));
                }
                _ => {}
            }
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(0..20))).await;
    }
    {
        // The watcher comes back (it relists until it does).
        let mut server = server.lock().unwrap();
        if server.broken {
            server.relist();
        }
    }
    tokio::time::sleep(Duration::from_secs(10)).await;

    let server = server.lock().unwrap();
    let seen = seen.lock().unwrap();
    assert_eq!(seen.overlaps, 0, "seed {seed}: a key ran twice at once");
    for obj in server.objects.values() {
        let uid = obj.metadata.uid.clone().unwrap_or_default();
        assert_eq!(
            seen.ext.get(&uid).copied(),
            Some(ext_of(obj)),
            "seed {seed}: no pass saw the last change of {:?} ({} passes in all)",
            obj.metadata.name,
            seen.passes
        );
    }
    shutdown.cancel();
    runner.abort();
}

#[tokio::test(start_paused = true)]
async fn every_change_reaches_a_pass_under_interleavings() {
    for seed in 0..150 {
        run_seed(seed).await;
    }
}
