//! Leader election against the in-test Lease endpoint of `crate::test_support`.

use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::*;
use crate::test_support::{Fake, lock, wait_for};

fn fast() -> LeaseTimings {
    LeaseTimings {
        lease_duration: Duration::from_secs(1),
        renew_deadline: Duration::from_millis(600),
        retry_period: Duration::from_millis(100),
    }
}

fn slow_lease() -> LeaseTimings {
    LeaseTimings {
        lease_duration: Duration::from_secs(30),
        ..fast()
    }
}

/// A candidate task as the runtime runs it: acquire, lead until cancelled or lost, release.
fn spawn_candidate(
    mut elector: LeaderElector,
    cancel: CancellationToken,
) -> (watch::Receiver<bool>, JoinHandle<Option<RenewOutcome>>) {
    let (tx, rx) = watch::channel(false);
    let task = tokio::spawn(async move {
        if !elector.acquire(&cancel).await {
            return None;
        }
        tx.send_replace(true);
        let outcome = elector.renew(&cancel).await;
        if outcome == RenewOutcome::Cancelled {
            elector.release().await.unwrap();
        }
        tx.send_replace(false);
        Some(outcome)
    });
    (rx, task)
}

#[tokio::test]
async fn exactly_one_of_two_contenders_leads() {
    let fake = Fake::start().await;
    let cancel = CancellationToken::new();
    // Generous deadlines: a loaded machine must not turn this into a takeover test.
    let timings = LeaseTimings {
        lease_duration: Duration::from_secs(5),
        renew_deadline: Duration::from_secs(3),
        retry_period: Duration::from_millis(100),
    };
    let (a, task_a) = spawn_candidate(fake.elector("a", timings), cancel.clone());
    let (b, task_b) = spawn_candidate(fake.elector("b", timings), cancel.clone());

    wait_for("a leader", 10, || *a.borrow() || *b.borrow()).await;
    let leader = if *a.borrow() { "a" } else { "b" };

    // Watch several renewals: the holder never changes and the other never leads.
    let mut renewals = 0;
    let mut last_renew = Value::Null;
    while renewals < 5 {
        let lease = fake.lease().unwrap();
        assert_eq!(lease["spec"]["holderIdentity"], json!(leader));
        assert!(*a.borrow() ^ *b.borrow(), "exactly one candidate leads");
        if lease["spec"]["renewTime"] != last_renew {
            last_renew = lease["spec"]["renewTime"].clone();
            renewals += 1;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(fake.lease().unwrap()["spec"]["leaseTransitions"], json!(0));
    assert_eq!(
        fake.lease().unwrap()["spec"]["leaseDurationSeconds"],
        json!(5)
    );

    cancel.cancel();
    let outcomes = [task_a.await.unwrap(), task_b.await.unwrap()];
    assert!(outcomes.contains(&Some(RenewOutcome::Cancelled)));
    assert!(
        outcomes.contains(&None),
        "the standby never led: {outcomes:?}"
    );
}

#[tokio::test]
async fn simultaneous_create_is_decided_by_the_server() {
    let fake = Fake::start().await;
    let mut a = fake.elector("a", fast());
    let mut b = fake.elector("b", fast());
    let (ra, rb) = tokio::join!(a.try_acquire_or_renew(), b.try_acquire_or_renew());
    let (ra, rb) = (ra.unwrap(), rb.unwrap());
    assert!(ra ^ rb, "exactly one wins: a={ra} b={rb}");
    let winner = if ra { "a" } else { "b" };
    assert_eq!(fake.holder().as_deref(), Some(winner));
    assert_eq!(a.is_leader(), ra);
    assert_eq!(b.is_leader(), rb);
}

#[tokio::test]
async fn a_standby_takes_over_after_the_lease_expires() {
    let fake = Fake::start().await;
    let mut a = fake.elector("a", fast());
    assert!(a.try_acquire_or_renew().await.unwrap());
    drop(a); // the leader vanishes without releasing (crash, partition)

    let mut b = fake.elector("b", fast());
    assert!(
        !b.try_acquire_or_renew().await.unwrap(),
        "a freshly observed lease held by another is respected"
    );
    assert_eq!(fake.holder().as_deref(), Some("a"));

    let cancel = CancellationToken::new();
    let acquired = tokio::time::timeout(Duration::from_secs(10), b.acquire(&cancel))
        .await
        .expect("b acquires within the deadline");
    assert!(acquired);
    let lease = fake.lease().unwrap();
    assert_eq!(lease["spec"]["holderIdentity"], json!("b"));
    assert_eq!(lease["spec"]["leaseTransitions"], json!(1));
    assert_eq!(lease["spec"]["leaseDurationSeconds"], json!(1));
}

#[tokio::test]
async fn clean_shutdown_releases_the_lease_for_an_immediate_handover() {
    let fake = Fake::start().await;
    let cancel_a = CancellationToken::new();
    let (a, task_a) = spawn_candidate(fake.elector("a", slow_lease()), cancel_a.clone());
    wait_for("a to lead", 10, || *a.borrow()).await;

    let mut b = fake.elector("b", slow_lease());
    assert!(
        !b.try_acquire_or_renew().await.unwrap(),
        "a holds a 30 s lease"
    );

    cancel_a.cancel();
    assert_eq!(task_a.await.unwrap(), Some(RenewOutcome::Cancelled));
    let lease = fake.lease().unwrap();
    assert_eq!(lease["spec"]["holderIdentity"], json!(""));
    assert_eq!(lease["spec"]["leaseDurationSeconds"], json!(1));

    // No waiting out the 30 s: the very next attempt succeeds.
    assert!(b.try_acquire_or_renew().await.unwrap());
    assert_eq!(fake.holder().as_deref(), Some("b"));
    assert_eq!(fake.lease().unwrap()["spec"]["leaseTransitions"], json!(1));
}

#[tokio::test]
async fn leadership_is_lost_when_renewals_fail_past_the_deadline() {
    let fake = Fake::start().await;
    let cancel = CancellationToken::new();
    let (a, task) = spawn_candidate(fake.elector("a", fast()), cancel.clone());
    wait_for("a to lead", 10, || *a.borrow()).await;

    lock(&fake.state).unavailable = true;
    let outcome = tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("loss is detected within the deadline")
        .unwrap();
    match outcome {
        Some(RenewOutcome::Lost(msg)) => assert!(msg.contains("could not renew"), "{msg}"),
        other => panic!("expected a loss, got {other:?}"),
    }
    assert!(!*a.borrow());
}

#[tokio::test]
async fn leadership_is_lost_when_another_holder_writes_the_lease() {
    let fake = Fake::start().await;
    let cancel = CancellationToken::new();
    let (a, task) = spawn_candidate(fake.elector("a", fast()), cancel.clone());
    wait_for("a to lead", 10, || *a.borrow()).await;

    {
        let mut state = lock(&fake.state);
        let mut lease = state.leases[&("ops".to_owned(), "test-lease".to_owned())].clone();
        lease["spec"]["holderIdentity"] = json!("intruder");
        lease["spec"]["leaseDurationSeconds"] = json!(30);
        state.store("ops", "test-lease", lease);
    }
    let outcome = tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("loss is detected within the deadline")
        .unwrap();
    assert_eq!(
        outcome,
        Some(RenewOutcome::Lost("lease is now held by intruder".into()))
    );
    assert_eq!(
        fake.holder().as_deref(),
        Some("intruder"),
        "a did not overwrite it"
    );
}

#[tokio::test]
async fn a_leader_recreates_a_deleted_lease_and_keeps_leading() {
    let fake = Fake::start().await;
    let mut a = fake.elector("a", slow_lease());
    assert!(a.try_acquire_or_renew().await.unwrap());
    lock(&fake.state).leases.clear();
    assert!(a.try_acquire_or_renew().await.unwrap());
    assert_eq!(fake.holder().as_deref(), Some("a"));
}

#[tokio::test]
async fn a_hung_api_server_neither_blocks_shutdown_nor_keeps_leadership() {
    let fake = Fake::start().await;
    lock(&fake.state).hang = true;
    let mut a = fake.elector("a", fast());
    let cancel = CancellationToken::new();
    let canceller = cancel.clone();
    let acquiring = tokio::spawn(async move { a.acquire(&canceller).await });
    cancel.cancel();
    let acquired = tokio::time::timeout(Duration::from_secs(10), acquiring)
        .await
        .expect("cancellation ends a hung acquire")
        .unwrap();
    assert!(!acquired);

    lock(&fake.state).hang = false;
    let cancel = CancellationToken::new();
    let (leading, task) = spawn_candidate(fake.elector("b", fast()), cancel.clone());
    wait_for("b to lead", 10, || *leading.borrow()).await;
    lock(&fake.state).hang = true;
    let outcome = tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("a hung renewal is a loss within the deadline")
        .unwrap();
    assert!(
        matches!(outcome, Some(RenewOutcome::Lost(_))),
        "{outcome:?}"
    );
}

#[tokio::test]
async fn release_succeeds_after_a_renewal_whose_answer_was_lost() {
    let fake = Fake::start().await;
    let mut a = fake.elector("a", slow_lease());
    assert!(a.try_acquire_or_renew().await.unwrap());
    // The server applied a renewal by `a` whose response never arrived (cut off by shutdown):
    // same holder, newer resourceVersion than `a` observed.
    {
        let mut state = lock(&fake.state);
        let lease = state.leases[&("ops".to_owned(), "test-lease".to_owned())].clone();
        state.store("ops", "test-lease", lease);
    }
    a.release().await.unwrap();
    assert_eq!(fake.holder().as_deref(), Some(""));
}

#[tokio::test]
async fn release_leaves_a_lease_taken_by_someone_else_alone() {
    let fake = Fake::start().await;
    let mut a = fake.elector("a", slow_lease());
    assert!(a.try_acquire_or_renew().await.unwrap());
    {
        let mut state = lock(&fake.state);
        let mut lease = state.leases[&("ops".to_owned(), "test-lease".to_owned())].clone();
        lease["spec"]["holderIdentity"] = json!("b");
        state.store("ops", "test-lease", lease);
    }
    a.release().await.unwrap();
    assert_eq!(fake.holder().as_deref(), Some("b"));
}

#[tokio::test]
async fn release_is_a_no_op_for_a_non_leader() {
    let fake = Fake::start().await;
    let mut a = fake.elector("a", slow_lease());
    assert!(a.try_acquire_or_renew().await.unwrap());
    let mut b = fake.elector("b", slow_lease());
    assert!(!b.try_acquire_or_renew().await.unwrap());
    b.release().await.unwrap();
    assert_eq!(fake.holder().as_deref(), Some("a"));
}

#[test]
fn identity_is_host_plus_random_suffix() {
    let one = default_identity();
    let two = default_identity();
    assert_ne!(one, two);
    let (host, suffix) = one.rsplit_once('_').unwrap();
    assert!(!host.is_empty());
    assert!(uuid::Uuid::parse_str(suffix).is_ok(), "{one}");
}
