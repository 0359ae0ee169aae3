"""Scenarios of the Python `kubernetes` client (unmodified) against an API server.

Usage: python kube_scenarios.py KUBECONFIG CRD_DIR SCENARIO [SCENARIO ...]

Each scenario asserts what a real kube-apiserver answers. For every scenario the script prints
`ok NAME` or `FAIL NAME: what differed`; it exits 0 only if all passed. The Rust tests in
tests/tests/clients_python.rs run it against an in-process devcluster.
"""
import glob
import json
import os
import sys
import tempfile
import time
import traceback
import uuid

import yaml
from datetime import datetime, timezone
from kubernetes import client, config, dynamic, watch
from kubernetes.client.rest import ApiException

AGENTS = ("agents.x-k8s.io", "v1beta1")
EXT = ("extensions.agents.x-k8s.io", "v1beta1")
SCENARIOS = {}
# Scenarios that use our custom resources (the others run without CRDs installed).
NEEDS_CRDS = {"custom_objects", "warm_pool_scale_subresource", "dynamic_client", "sdk_claim_calls"}


def scenario(fn):
    SCENARIOS[fn.__name__] = fn
    return fn


def unique(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def api_error(fn, *args, **kwargs):
    """Calls fn, expecting an ApiException; returns (status, parsed Status body)."""
    try:
        fn(*args, **kwargs)
    except ApiException as e:
        body = json.loads(e.body) if e.body else {}
        return e.status, body
    raise AssertionError(f"{fn.__name__} succeeded, expected an error")


def expect_status(got, code, reason):
    status, body = got
    assert status == code, f"HTTP {status}, expected {code}: {body}"
    assert body.get("kind") == "Status", f"error body is not a Status: {body}"
    assert body.get("code") == code, f"Status.code {body.get('code')}, expected {code}"
    assert body.get("reason") == reason, f"Status.reason {body.get('reason')!r}, expected {reason!r}"
    assert body.get("status") == "Failure", body
    return body


def wait_until(what, probe, timeout=10.0):
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


def gone(read, *args):
    try:
        read(*args)
        return False
    except ApiException as e:
        if e.status == 404:
            return True
        raise


def pod(name, labels=None, containers=("main",)):
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels=labels or {}),
        spec=client.V1PodSpec(
            containers=[client.V1Container(name=c, image="busybox:1.36") for c in containers],
            termination_grace_period_seconds=0,
        ),
    )


def install_crds(crd_dir):
    ext = client.ApiextensionsV1Api()
    names = []
    for path in sorted(glob.glob(os.path.join(crd_dir, "*.yaml"))):
        with open(path) as f:
            crd = yaml.safe_load(f)
        try:
            ext.create_custom_resource_definition(crd)
        except ApiException as e:
            if e.status != 409:
                raise
        names.append(crd["metadata"]["name"])

    def established():
        for name in names:
            conds = ext.read_custom_resource_definition(name).status.conditions or []
            if not any(c.type == "Established" and c.status == "True" for c in conds):
                return False
        return True

    wait_until("CRDs Established", established)


# --- core resources -------------------------------------------------------------------------


@scenario
def namespaces_lifecycle(ctx):
    core = client.CoreV1Api()
    name = unique("ns")
    made = core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    assert made.status.phase == "Active", made.status
    assert made.metadata.labels.get("kubernetes.io/metadata.name") == name, made.metadata.labels
    assert name in [n.metadata.name for n in core.list_namespace().items]
    core.create_namespaced_config_map(
        name, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="inside"))
    )
    expect_status(
        api_error(core.create_namespaced_config_map, "no-such-ns",
                  client.V1ConfigMap(metadata=client.V1ObjectMeta(name="x"))),
        404, "NotFound",
    )
    core.delete_namespace(name)
    # Deletion empties the namespace, then removes it.
    wait_until("namespace removed", lambda: gone(core.read_namespace, name))
    assert name not in [n.metadata.name for n in core.list_namespace().items]


@scenario
def pods_crud_and_errors(ctx):
    core = client.CoreV1Api()
    ns = "default"
    made = core.create_namespaced_pod(ns, pod("crud-a", {"app": "crud"}))
    assert made.metadata.uid and made.metadata.resource_version, made.metadata
    assert made.metadata.namespace == ns
    assert made.metadata.creation_timestamp is not None

    body = expect_status(api_error(core.create_namespaced_pod, ns, pod("crud-a")), 409, "AlreadyExists")
    assert body["details"]["name"] == "crud-a" and body["details"]["kind"] == "pods", body
    assert body["message"] == 'pods "crud-a" already exists', body["message"]

    body = expect_status(api_error(core.read_namespaced_pod, "crud-missing", ns), 404, "NotFound")
    assert body["message"] == 'pods "crud-missing" not found', body["message"]
    assert body["details"]["name"] == "crud-missing" and body["details"]["kind"] == "pods", body
    # A core kind's Status details carry no group key at all.
    assert "group" not in body["details"], body

    # Optimistic concurrency: a write carrying an old resourceVersion is a 409 Conflict.
    # (A ConfigMap: the simulated kubelet writes pod status concurrently, as a real one does.)
    cm = core.create_namespaced_config_map(ns, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="crud-cm"), data={"step": "0"}))
    cm.data["step"] = "1"
    updated = core.replace_namespaced_config_map("crud-cm", ns, cm)
    assert updated.metadata.resource_version != cm.metadata.resource_version
    cm.data["step"] = "2"
    body = expect_status(api_error(core.replace_namespaced_config_map, "crud-cm", ns, cm), 409, "Conflict")
    assert "the object has been modified" in body["message"], body["message"]
    assert core.read_namespaced_config_map("crud-cm", ns).data == {"step": "1"}

    # Invalid name: 422 with the field path.
    body = expect_status(api_error(core.create_namespaced_pod, ns, pod("Not_Valid")), 422, "Invalid")
    fields = [c.get("field") for c in body["details"].get("causes", [])]
    assert "metadata.name" in fields, body

    core.delete_namespaced_pod("crud-a", ns, grace_period_seconds=0)
    wait_until("pod deleted", lambda: gone(core.read_namespaced_pod, "crud-a", ns))
    expect_status(api_error(core.delete_namespaced_pod, "crud-a", ns), 404, "NotFound")


@scenario
def events_through_both_apis(ctx):
    """An event a controller writes through events.k8s.io/v1 is a core/v1 Event too (one
    resource, two versions), found by the involvedObject field selectors kubectl describe uses."""
    core = client.CoreV1Api()
    events = client.EventsV1Api()
    ns = "default"
    cm = core.create_namespaced_config_map(ns, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name=unique("observed"))))
    regarding = client.V1ObjectReference(
        api_version="v1", kind="ConfigMap", name=cm.metadata.name, namespace=ns,
        uid=cm.metadata.uid)
    # eventTime is a MicroTime: kube-apiserver wants six fraction digits, and the client
    # prints a datetime without any when its microseconds are 0 (400 "cannot parse").
    now = datetime.now(timezone.utc)
    now = now.replace(microsecond=now.microsecond or 1)
    written = events.create_namespaced_event(ns, client.EventsV1Event(
        # kube-apiserver validates generateName as a DNS subdomain: it may not end with '.'.
        metadata=client.V1ObjectMeta(generate_name=cm.metadata.name + "-"),
        event_time=now, action="Observe", reason="Observed", type="Normal",
        note="saw the configmap", regarding=regarding,
        reporting_controller="example.com/observer", reporting_instance="observer-0"))
    selector = ",".join([
        f"involvedObject.name={cm.metadata.name}", f"involvedObject.namespace={ns}",
        "involvedObject.kind=ConfigMap", f"involvedObject.uid={cm.metadata.uid}",
    ])
    listed = core.list_namespaced_event(ns, field_selector=selector).items
    assert [e.metadata.name for e in listed] == [written.metadata.name], listed
    e = listed[0]
    assert e.message == "saw the configmap", e
    assert e.reason == "Observed" and e.type == "Normal" and e.action == "Observe", e
    assert e.reporting_component == "example.com/observer", e
    assert e.reporting_instance == "observer-0", e
    assert e.involved_object.uid == cm.metadata.uid, e.involved_object
    assert e.event_time is not None, e
    assert e.metadata.resource_version == written.metadata.resource_version
    # And back: a core event (with eventTime, so the v1 model accepts it) read as events.k8s.io/v1.
    old = core.create_namespaced_event(ns, client.CoreV1Event(
        metadata=client.V1ObjectMeta(name=unique("legacy")),
        involved_object=client.V1ObjectReference(kind="ConfigMap", name=cm.metadata.name,
                                                 namespace=ns),
        reason="Legacy", message="old recorder", type="Warning", count=3, event_time=now,
        # With eventTime set, kube-apiserver validates it as a new-style event: these are required.
        reporting_component="old-controller", reporting_instance="old-controller-0", action="Record",
        source=client.V1EventSource(component="old-controller")))
    seen = events.read_namespaced_event(old.metadata.name, ns)
    assert seen.note == "old recorder", seen
    assert seen.deprecated_count == 3, seen
    assert seen.deprecated_source.component == "old-controller", seen
    assert seen.regarding.name == cm.metadata.name, seen
    by_regarding = events.list_namespaced_event(
        ns, field_selector=f"regarding.name={cm.metadata.name},reason=Legacy").items
    assert [x.metadata.name for x in by_regarding] == [old.metadata.name], by_regarding
    events.delete_namespaced_event(old.metadata.name, ns)
    assert gone(core.read_namespaced_event, old.metadata.name, ns)


@scenario
def selectors(ctx):
    core = client.CoreV1Api()
    ns = "default"
    for name, labels in [("sel-a", {"env": "prod", "tier": "web"}),
                         ("sel-b", {"env": "dev", "tier": "db"}),
                         ("sel-c", {"env": "test"})]:
        core.create_namespaced_pod(ns, pod(name, dict(labels, suite="sel")))

    def names(**kw):
        return sorted(p.metadata.name for p in core.list_namespaced_pod(ns, **kw).items)

    assert names(label_selector="suite=sel,env=prod") == ["sel-a"]
    assert names(label_selector="suite=sel,env!=prod") == ["sel-b", "sel-c"]
    assert names(label_selector="suite=sel,env in (dev,test)") == ["sel-b", "sel-c"]
    assert names(label_selector="suite=sel,env notin (dev)") == ["sel-a", "sel-c"]
    assert names(label_selector="suite=sel,tier") == ["sel-a", "sel-b"]
    assert names(label_selector="suite=sel,!tier") == ["sel-c"]
    assert names(field_selector="metadata.name=sel-b") == ["sel-b"]
    assert names(label_selector="suite=sel", field_selector="metadata.name!=sel-b") == ["sel-a", "sel-c"]
    assert names(label_selector="suite=sel", field_selector="metadata.namespace=default") == [
        "sel-a", "sel-b", "sel-c"]
    # Across namespaces.
    every = core.list_pod_for_all_namespaces(label_selector="suite=sel")
    assert sorted(p.metadata.name for p in every.items) == ["sel-a", "sel-b", "sel-c"]
    # Pods are Running on the simulated nodes: status.phase and spec.nodeName are indexed fields.
    wait_until("pods Running",
               lambda: names(label_selector="suite=sel", field_selector="status.phase=Running")
               == ["sel-a", "sel-b", "sel-c"])
    node = core.read_namespaced_pod("sel-a", ns).spec.node_name
    assert node, "a Running pod has spec.nodeName"
    assert "sel-a" in names(field_selector=f"spec.nodeName={node}")

    expect_status(api_error(core.list_namespaced_pod, ns, label_selector="env in (a"), 400, "BadRequest")
    expect_status(api_error(core.list_namespaced_pod, ns, field_selector="spec.nope=1"), 400, "BadRequest")
    # Pagination: limit + continue.
    first = core.list_namespaced_pod(ns, label_selector="suite=sel", limit=2)
    assert len(first.items) == 2 and first.metadata._continue, first.metadata
    rest = core.list_namespaced_pod(ns, label_selector="suite=sel", limit=2, _continue=first.metadata._continue)
    assert len(rest.items) == 1 and not rest.metadata._continue, rest.metadata


@scenario
def watch_events_and_timeout(ctx):
    core = client.CoreV1Api()
    ns = "default"
    listed = core.list_namespaced_config_map(ns)
    rv = listed.metadata.resource_version
    core.create_namespaced_config_map(ns, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="w-cm", labels={"w": "1"}), data={"k": "1"}))
    core.patch_namespaced_config_map("w-cm", ns, {"data": {"k": "2"}})
    core.delete_namespaced_config_map("w-cm", ns)

    seen = []
    start = time.monotonic()
    for ev in watch.Watch().stream(core.list_namespaced_config_map, ns, label_selector="w=1",
                                   resource_version=rv, timeout_seconds=1):
        seen.append((ev["type"], ev["object"].metadata.name, (ev["object"].data or {}).get("k")))
        assert ev["raw_object"]["kind"] == "ConfigMap" and ev["raw_object"]["apiVersion"] == "v1", ev
    elapsed = time.monotonic() - start
    assert seen == [("ADDED", "w-cm", "1"), ("MODIFIED", "w-cm", "2"), ("DELETED", "w-cm", "2")], seen
    # The server ends the stream at timeoutSeconds (the SDK has no client read timeout); the
    # bound only tells a hang from a close.
    assert elapsed < 10, f"watch with timeoutSeconds=1 still open after {elapsed:.1f}s"

    # Without a resourceVersion the watch starts with the current state as ADDED events.
    core.create_namespaced_config_map(ns, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="w-now", labels={"w": "2"})))
    first = []
    for ev in watch.Watch().stream(core.list_namespaced_config_map, ns, label_selector="w=2",
                                   timeout_seconds=1):
        first.append((ev["type"], ev["object"].metadata.name))
    assert first == [("ADDED", "w-now")], first

    # A label change that moves an object out of the selector is a DELETED for that watch
    # (when resuming from a resourceVersion).
    rv = core.read_namespaced_config_map("w-now", ns).metadata.resource_version
    core.patch_namespaced_config_map("w-now", ns, {"metadata": {"labels": {"w": "3"}}})
    moved = [(ev["type"], ev["object"].metadata.name) for ev in watch.Watch().stream(
        core.list_namespaced_config_map, ns, label_selector="w=2", resource_version=rv,
        timeout_seconds=1)]
    assert moved == [("DELETED", "w-now")], moved


@scenario
def watch_expired_resource_version(ctx):
    """Run against a cluster with a tiny watch history: an old resourceVersion is 410 Gone.

    devcluster (a history of 10 events) forgets it at once; kube-apiserver with the real
    cluster's short history once etcd's next compaction (every second) has passed it, so the
    watch is tried again until then (30 s at most)."""
    core = client.CoreV1Api()
    ns = "default"
    old = core.list_namespaced_config_map(ns).metadata.resource_version
    for i in range(30):
        core.create_namespaced_config_map(ns, client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name=f"exp-{i}")))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            for _ in watch.Watch().stream(core.list_namespaced_config_map, ns,
                                          resource_version=old, timeout_seconds=1):
                pass
        except ApiException as e:
            # Either the HTTP status or the ERROR event carries 410 (kubernetes-python reads
            # code/reason/message of the ERROR object).
            assert e.status == 410, f"status {e.status}: {e.reason}"
            assert "Expired" in (e.reason or "") or "Gone" in (e.reason or ""), e.reason
            return
    raise AssertionError("watch from a compacted resourceVersion did not fail with 410")


@scenario
def patch_kinds(ctx):
    core = client.CoreV1Api()
    ns = "default"
    core.create_namespaced_pod(ns, pod("patch-p", {"a": "1"}, containers=("one", "two")))
    # kubernetes-python sends strategic merge patch for a dict body on core kinds: containers
    # merge by name.
    out = core.patch_namespaced_pod("patch-p", ns, {"spec": {"containers": [{"name": "two", "image": "busybox:1.37"}]}})
    images = {c.name: c.image for c in out.spec.containers}
    assert images == {"one": "busybox:1.36", "two": "busybox:1.37"}, images
    # Explicit JSON merge patch: null removes a key.
    out = core.patch_namespaced_pod("patch-p", ns, {"metadata": {"labels": {"a": None, "b": "2"}}},
                                    _content_type="application/merge-patch+json")
    assert out.metadata.labels == {"b": "2"}, out.metadata.labels
    # JSON patch (a list body).
    out = core.patch_namespaced_pod("patch-p", ns, [
        {"op": "test", "path": "/metadata/labels/b", "value": "2"},
        {"op": "add", "path": "/metadata/labels/c", "value": "3"},
    ])
    assert out.metadata.labels == {"b": "2", "c": "3"}, out.metadata.labels
    # A failing test op rejects the whole patch.
    status, _ = api_error(core.patch_namespaced_pod, "patch-p", ns,
                          [{"op": "test", "path": "/metadata/labels/b", "value": "nope"},
                           {"op": "add", "path": "/metadata/labels/d", "value": "4"}])
    assert status == 422, f"failed JSON patch test op: HTTP {status}, expected 422"
    assert "d" not in core.read_namespaced_pod("patch-p", ns).metadata.labels
    # Patching a missing object is 404.
    expect_status(api_error(core.patch_namespaced_pod, "patch-none", ns, {"metadata": {"labels": {"x": "y"}}}),
                  404, "NotFound")
    # Pod status subresource: writes status, leaves spec alone.
    out = core.patch_namespaced_pod_status("patch-p", ns, {"status": {"conditions": [
        {"type": "Custom", "status": "True"}]}})
    assert any(c.type == "Custom" for c in out.status.conditions), out.status.conditions


@scenario
def custom_objects(ctx):
    custom = client.CustomObjectsApi()
    g, v = AGENTS
    ns = "default"
    body = {
        "apiVersion": f"{g}/{v}", "kind": "Sandbox",
        "metadata": {"name": "co-box", "labels": {"suite": "co"}},
        "spec": {"podTemplate": {"spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}},
                 "unknownField": "pruned"},
    }
    made = custom.create_namespaced_custom_object(g, v, ns, "sandboxes", body)
    assert made["metadata"]["generation"] == 1, made["metadata"]
    assert "unknownField" not in made["spec"], "unknown fields are pruned"
    assert made["kind"] == "Sandbox" and made["apiVersion"] == f"{g}/{v}"
    expect_status(api_error(custom.create_namespaced_custom_object, g, v, ns, "sandboxes", body),
                  409, "AlreadyExists")
    body404 = expect_status(api_error(custom.get_namespaced_custom_object, g, v, ns, "sandboxes", "co-none"),
                            404, "NotFound")
    assert body404["details"]["group"] == g and body404["details"]["kind"] == "sandboxes", body404

    listed = custom.list_namespaced_custom_object(g, v, ns, "sandboxes", label_selector="suite=co")
    assert listed["kind"] == "SandboxList", listed["kind"]
    assert [i["metadata"]["name"] for i in listed["items"]] == ["co-box"]
    every = custom.list_cluster_custom_object(g, v, "sandboxes", label_selector="suite=co")
    assert [i["metadata"]["name"] for i in every["items"]] == ["co-box"]

    # Status is a subresource: the main resource ignores status, the status endpoint ignores spec;
    # generation moves with spec only.
    out = custom.patch_namespaced_custom_object(g, v, ns, "sandboxes", "co-box",
                                                {"status": {"podIPs": ["10.0.0.1"]}})
    assert "podIPs" not in (out.get("status") or {}), out.get("status")
    out = custom.patch_namespaced_custom_object_status(g, v, ns, "sandboxes", "co-box",
                                                       {"status": {"podIPs": ["10.0.0.2"]},
                                                        "spec": {"operatingMode": "Suspended"}})
    assert out["status"]["podIPs"] == ["10.0.0.2"], out["status"]
    assert out["spec"]["operatingMode"] == "Running", "status write must not change spec"
    assert out["metadata"]["generation"] == 1, out["metadata"]
    out = custom.patch_namespaced_custom_object(g, v, ns, "sandboxes", "co-box",
                                                {"spec": {"operatingMode": "Suspended"}})
    assert out["metadata"]["generation"] == 2, out["metadata"]
    assert out["status"]["podIPs"] == ["10.0.0.2"], "spec write keeps status"

    # Schema validation names the field.
    bad = json.loads(json.dumps(body))
    bad["metadata"]["name"] = "co-bad"
    bad["spec"]["operatingMode"] = "Paused"
    body422 = expect_status(api_error(custom.create_namespaced_custom_object, g, v, ns, "sandboxes", bad),
                            422, "Invalid")
    fields = [c.get("field") for c in body422["details"].get("causes", [])]
    assert "spec.operatingMode" in fields, body422
    bad["spec"]["operatingMode"] = 5
    body422 = expect_status(api_error(custom.create_namespaced_custom_object, g, v, ns, "sandboxes", bad),
                            422, "Invalid")
    assert "spec.operatingMode" in [c.get("field") for c in body422["details"].get("causes", [])], body422

    # Strategic merge patch is not supported for custom resources.
    status, _ = api_error(custom.patch_namespaced_custom_object, g, v, ns, "sandboxes", "co-box",
                          {"metadata": {"labels": {"x": "y"}}},
                          _content_type="application/strategic-merge-patch+json")
    assert status == 415, f"strategic merge patch on a custom resource: HTTP {status}, expected 415"

    # Watch from a resourceVersion.
    rv = out["metadata"]["resourceVersion"]
    custom.patch_namespaced_custom_object(g, v, ns, "sandboxes", "co-box", {"metadata": {"labels": {"w": "1"}}})
    custom.delete_namespaced_custom_object(g, v, ns, "sandboxes", "co-box")
    seen = [(ev["type"], ev["object"]["metadata"]["name"]) for ev in watch.Watch().stream(
        custom.list_namespaced_custom_object, g, v, ns, "sandboxes",
        resource_version=rv, timeout_seconds=1)]
    assert seen == [("MODIFIED", "co-box"), ("DELETED", "co-box")], seen


@scenario
def warm_pool_scale_subresource(ctx):
    custom = client.CustomObjectsApi()
    g, v = EXT
    ns = "default"
    made = custom.create_namespaced_custom_object(g, v, ns, "sandboxwarmpools", {
        "apiVersion": f"{g}/{v}", "kind": "SandboxWarmPool",
        "metadata": {"name": "scale-pool"},
        "spec": {"sandboxTemplateRef": {"name": "t"}},
    })
    # Defaults from the schema are applied on create.
    assert made["spec"]["replicas"] == 1, made["spec"]
    scale = custom.get_namespaced_custom_object_scale(g, v, ns, "sandboxwarmpools", "scale-pool")
    assert scale["kind"] == "Scale" and scale["apiVersion"] == "autoscaling/v1", scale
    assert scale["spec"]["replicas"] == 1, scale
    custom.patch_namespaced_custom_object_scale(g, v, ns, "sandboxwarmpools", "scale-pool",
                                                {"spec": {"replicas": 4}})
    got = custom.get_namespaced_custom_object(g, v, ns, "sandboxwarmpools", "scale-pool")
    assert got["spec"]["replicas"] == 4, got["spec"]
    body = expect_status(api_error(custom.patch_namespaced_custom_object, g, v, ns, "sandboxwarmpools",
                                   "scale-pool", {"spec": {"replicas": -1}}), 422, "Invalid")
    assert "spec.replicas" in [c.get("field") for c in body["details"].get("causes", [])], body


@scenario
def deletion_propagation(ctx):
    core = client.CoreV1Api()
    ns = "default"

    def family(tag):
        owner = core.create_namespaced_config_map(ns, client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name=f"owner-{tag}")))
        ref = client.V1OwnerReference(api_version="v1", kind="ConfigMap", name=owner.metadata.name,
                                      uid=owner.metadata.uid, block_owner_deletion=True)
        core.create_namespaced_config_map(ns, client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name=f"child-{tag}", owner_references=[ref])))

    family("bg")
    core.delete_namespaced_config_map("owner-bg", ns, propagation_policy="Background")
    wait_until("background: child collected",
               lambda: gone(core.read_namespaced_config_map, "child-bg", ns))

    family("fg")
    core.delete_namespaced_config_map("owner-fg", ns, propagation_policy="Foreground")
    wait_until("foreground: child and owner gone",
               lambda: gone(core.read_namespaced_config_map, "child-fg", ns)
               and gone(core.read_namespaced_config_map, "owner-fg", ns))

    family("or")
    core.delete_namespaced_config_map("owner-or", ns, propagation_policy="Orphan")
    wait_until("orphan: owner gone", lambda: gone(core.read_namespaced_config_map, "owner-or", ns))
    wait_until("orphan: child keeps living without the owner reference",
               lambda: not core.read_namespaced_config_map("child-or", ns).metadata.owner_references)

    # Preconditions on delete.
    core.create_namespaced_config_map(ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="pre")))
    expect_status(api_error(core.delete_namespaced_config_map, "pre", ns,
                            body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid="wrong"))),
                  409, "Conflict")


@scenario
def dynamic_client(ctx):
    # The dynamic client caches discovery in a file, by default in the system's temp directory
    # (`osrcp-<hash>.json`), where it would outlive the run.
    with tempfile.TemporaryDirectory() as cache:
        dynamic_client_with_cache(os.path.join(cache, "discovery.json"))


def dynamic_client_with_cache(cache_file):
    dyn = dynamic.DynamicClient(client.ApiClient(), cache_file=cache_file)
    sandboxes = dyn.resources.get(api_version="agents.x-k8s.io/v1beta1", kind="Sandbox")
    assert sandboxes.namespaced and sandboxes.name == "sandboxes"
    assert "status" in [s for s in sandboxes.subresources], sandboxes.subresources
    pools = dyn.resources.get(api_version="extensions.agents.x-k8s.io/v1beta1", short_names=["swp"])
    assert pools.kind == "SandboxWarmPool", pools.kind
    sandboxes.create(namespace="default", body={
        "apiVersion": "agents.x-k8s.io/v1beta1", "kind": "Sandbox",
        "metadata": {"name": "dyn-box"},
        "spec": {"podTemplate": {"spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}}},
    })
    got = sandboxes.get(namespace="default", name="dyn-box")
    assert got.metadata.name == "dyn-box" and got.kind == "Sandbox"
    cms = dyn.resources.get(api_version="v1", kind="ConfigMap")
    assert cms.get(namespace="default").kind == "ConfigMapList"
    sandboxes.delete(namespace="default", name="dyn-box")


@scenario
def sdk_claim_calls(ctx):
    """The exact requests k8s-agent-sandbox 1.0.8 makes (clients.md 1.1), with the claim's
    status written here in place of the controller."""
    custom = client.CustomObjectsApi()
    g, v = EXT
    ns = "default"
    name = "sandbox-claim-" + uuid.uuid4().hex[:8]
    manifest = {
        "apiVersion": f"{g}/{v}", "kind": "SandboxClaim",
        "metadata": {"name": name,
                     "labels": {"acceptance": "yes", "agents.x-k8s.io/created-by": "python-client"},
                     "annotations": {"agents.x-k8s.io/client-first-requested-at": "2026-11-29T18:16:44.364183+00:00"}},
        "spec": {"warmPoolRef": {"name": "python-sandbox-warmpool"}},
    }
    # No Content-Type header on this POST: kubernetes 37 sends none for custom objects.
    made = custom.create_namespaced_custom_object(g, v, ns, "sandboxclaims", manifest)
    rv, uid = made["metadata"]["resourceVersion"], made["metadata"]["uid"]
    assert rv and uid, made["metadata"]
    assert made["metadata"]["namespace"] == ns

    custom.patch_namespaced_custom_object_status(g, v, ns, "sandboxclaims", name, {"status": {
        "sandbox": {"name": "warm-xyz"},
        "conditions": [{"type": "Ready", "status": "True", "reason": "SandboxReady", "message": "ready",
                        "lastTransitionTime": "2026-11-29T18:16:45Z"}]}})
    ready = None
    w = watch.Watch()
    for ev in w.stream(custom.list_namespaced_custom_object, g, v, ns, "sandboxclaims",
                       field_selector=f"metadata.name={name}", resource_version=rv, timeout_seconds=5):
        obj = ev["object"]
        assert obj["metadata"]["name"] == name, obj["metadata"]["name"]
        conds = obj.get("status", {}).get("conditions", [])
        if any(c["type"] == "Ready" and c["status"] == "True" for c in conds):
            ready = (ev["type"], obj["status"]["sandbox"]["name"])
            w.stop()
    assert ready == ("MODIFIED", "warm-xyz"), ready

    listed = custom.list_namespaced_custom_object(g, v, ns, "sandboxclaims", label_selector="acceptance=yes")
    assert name in [i["metadata"]["name"] for i in listed["items"]]
    # A missing Sandbox (agents.x-k8s.io: asking the extensions group for `sandboxes`, a resource
    # it does not have, gets kube-apiserver's plain-text "404 page not found", not a Status).
    expect_status(api_error(custom.get_namespaced_custom_object, *AGENTS, ns, "sandboxes", "warm-none"),
                  404, "NotFound")
    # Rollback delete: body {"preconditions":{"uid":...}} without apiVersion/kind.
    expect_status(api_error(custom.delete_namespaced_custom_object, g, v, ns, "sandboxclaims", name,
                            body={"preconditions": {"uid": "00000000-0000-0000-0000-000000000000"}}),
                  409, "Conflict")
    custom.delete_namespaced_custom_object(g, v, ns, "sandboxclaims", name, body={"preconditions": {"uid": uid}})
    expect_status(api_error(custom.delete_namespaced_custom_object, g, v, ns, "sandboxclaims", name),
                  404, "NotFound")


def main(argv):
    if len(argv) < 4:
        print(__doc__, file=sys.stderr)
        return 2
    kubeconfig, crd_dir, names = argv[1], argv[2], argv[3:]
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        print(f"unknown scenarios {unknown}; known: {sorted(SCENARIOS)}", file=sys.stderr)
        return 2
    config.load_kube_config(config_file=kubeconfig)
    if any(n in NEEDS_CRDS for n in names):
        install_crds(crd_dir)
    failed = 0
    for name in names:
        try:
            SCENARIOS[name](None)
            print(f"ok {name}", flush=True)
        except Exception as e:  # report every scenario, not just the first failure
            failed += 1
            where = traceback.extract_tb(e.__traceback__)[-1]
            print(f"FAIL {name}: {type(e).__name__}: {e} (line {where.lineno})", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
