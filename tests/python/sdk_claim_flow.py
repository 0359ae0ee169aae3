"""The published SDK (k8s-agent-sandbox, pinned in requirements.txt) against an API server running
both agent-sandbox controllers.

Usage: python sdk_claim_flow.py KUBECONFIG WARM_POOL COLD_POOL

WARM_POOL has Ready members (warm adoption), COLD_POOL has `replicas: 0` (cold start). Direct
connection mode is used: the SDK never talks to the sandbox process here (no pod network), only
to the Kubernetes API. Prints `ok STEP` per step; exits non-zero on the first failure.
"""
import re
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from kubernetes import client, config
from kubernetes.client.rest import ApiException
from k8s_agent_sandbox import (
    SandboxClient,
    SandboxTemplateNotFoundError,
    SandboxWarmPoolNotFoundError,
)
from k8s_agent_sandbox.models import SandboxDirectConnectionConfig

EXT = ("extensions.agents.x-k8s.io", "v1beta1")
AGENTS = ("agents.x-k8s.io", "v1beta1")
NS = "default"


def step(name):
    print(f"ok {name}", flush=True)


def wait_until(what, probe, timeout=20.0):
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


def get_or_none(fn, *args):
    try:
        return fn(*args)
    except ApiException as e:
        if e.status == 404:
            return None
        raise


def claim_of(custom, name):
    return get_or_none(custom.get_namespaced_custom_object, *EXT, NS, "sandboxclaims", name)


def sandbox_of(custom, name):
    return get_or_none(custom.get_namespaced_custom_object, *AGENTS, NS, "sandboxes", name)


def pods_of(core, sandbox_name):
    return [p for p in core.list_namespaced_pod(NS).items
            if any(o.kind == "Sandbox" and o.name == sandbox_name
                   for o in (p.metadata.owner_references or []))]


def ready_condition(obj):
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return c
    return None


# Dependents go by garbage collection. kube-controller-manager's collector learns of a kind
# added after it started (our CRDs) only at its discovery resync, every 30 s, so on the real
# ground the first collection can take that much longer (e2e_tests::GC_DEADLINE says the same).
GC_TIMEOUT = 75.0


def check_gone(custom, core, claim_name, sandbox_id):
    wait_until("claim deleted", lambda: claim_of(custom, claim_name) is None)
    wait_until("sandbox deleted with its claim", lambda: sandbox_of(custom, sandbox_id) is None,
               timeout=GC_TIMEOUT)
    wait_until("pod deleted with its sandbox", lambda: not pods_of(core, sandbox_id),
               timeout=GC_TIMEOUT)


def main(kubeconfig, warm_pool, cold_pool):
    api_client = config.new_client_from_config(config_file=kubeconfig)
    custom = client.CustomObjectsApi(api_client)
    core = client.CoreV1Api(api_client)
    sdk = SandboxClient(
        connection_config=SandboxDirectConnectionConfig(api_url="http://127.0.0.1:9"),
        api_client=api_client,
    )

    # Warm path: a Ready pool member is adopted, so the Sandbox keeps its own name.
    start = time.monotonic()
    sb = sdk.create_sandbox(warm_pool, NS, sandbox_ready_timeout=30, labels={"acceptance": "yes"})
    took = time.monotonic() - start
    assert re.fullmatch(r"sandbox-claim-[0-9a-f]{8}", sb.claim_name), sb.claim_name
    assert sb.sandbox_id and sb.sandbox_id != sb.claim_name, (sb.claim_name, sb.sandbox_id)
    assert sb.status()[0] == "SandboxReady", sb.status()
    claim = claim_of(custom, sb.claim_name)
    labels = claim["metadata"].get("labels") or {}
    assert labels.get("agents.x-k8s.io/created-by") == "python-client", labels
    assert labels.get("acceptance") == "yes", labels
    assert "agents.x-k8s.io/client-first-requested-at" in (claim["metadata"].get("annotations") or {})
    assert claim["status"]["sandbox"]["name"] == sb.sandbox_id, claim["status"]
    assert (ready_condition(claim) or {}).get("status") == "True", claim["status"]
    sandbox = sandbox_of(custom, sb.sandbox_id)
    owners = sandbox["metadata"].get("ownerReferences") or []
    assert [(o["kind"], o["name"]) for o in owners if o.get("controller")] == [("SandboxClaim", sb.claim_name)], owners
    pods = pods_of(core, sb.sandbox_id)
    assert len(pods) == 1, [p.metadata.name for p in pods]
    assert sb.get_pod_name() == pods[0].metadata.name, (sb.get_pod_name(), pods[0].metadata.name)
    assert sb.get_pod_ip() == pods[0].status.pod_ip, (sb.get_pod_ip(), pods[0].status.pod_ip)
    step(f"warm create Ready in {took:.2f}s")

    assert sb.claim_name in sdk.list_all_sandboxes(NS, "acceptance=yes")
    again = sdk.get_sandbox(sb.claim_name, NS)
    assert again.sandbox_id == sb.sandbox_id, (again.sandbox_id, sb.sandbox_id)
    step("list and re-attach")

    claim_name, sandbox_id = sb.claim_name, sb.sandbox_id
    sb.terminate()  # clears sb.claim_name
    check_gone(custom, core, claim_name, sandbox_id)
    step("warm delete removes claim, sandbox and pod")

    # Concurrent claims racing for a one-member pool: every claim gets its own Sandbox (the
    # losers of the race cold-start from the template), each owned by its claim only.
    def create_one(i):
        own = SandboxClient(
            connection_config=SandboxDirectConnectionConfig(api_url="http://127.0.0.1:9"),
            api_client=config.new_client_from_config(config_file=kubeconfig),
        )
        return own.create_sandbox(warm_pool, NS, sandbox_ready_timeout=60, labels={"race": "yes"})

    with ThreadPoolExecutor(max_workers=4) as pool:
        racers = list(pool.map(create_one, range(4)))
    ids = [r.sandbox_id for r in racers]
    assert len(set(ids)) == 4, ids
    for r in racers:
        sandbox = sandbox_of(custom, r.sandbox_id)
        owners = [(o["kind"], o["name"]) for o in sandbox["metadata"].get("ownerReferences") or []
                  if o.get("controller")]
        assert owners == [("SandboxClaim", r.claim_name)], (r.claim_name, owners)
        assert r.status()[0] == "SandboxReady", r.status()
    for r in racers:
        claim_name, sandbox_id = r.claim_name, r.sandbox_id
        r.terminate()
        check_gone(custom, core, claim_name, sandbox_id)
    step("4 concurrent claims on a 1-member pool each get their own Ready sandbox")

    # Cold path: the pool has no members, the Sandbox is built from the template for this claim.
    cold = sdk.create_sandbox(cold_pool, NS, sandbox_ready_timeout=30, pod_labels={"sandbox.users.io/client-id": "t"})
    assert cold.sandbox_id == cold.claim_name, (cold.sandbox_id, cold.claim_name)
    assert cold.status()[0] == "SandboxReady", cold.status()
    pods = pods_of(core, cold.sandbox_id)
    assert len(pods) == 1 and pods[0].metadata.labels.get("sandbox.users.io/client-id") == "t", \
        [(p.metadata.name, p.metadata.labels) for p in pods]
    step("cold create Ready with pod labels")
    claim_name, sandbox_id = cold.claim_name, cold.sandbox_id
    sdk.delete_sandbox(claim_name, NS)  # terminates the handle, clearing cold.claim_name
    check_gone(custom, core, claim_name, sandbox_id)
    step("cold delete removes claim, sandbox and pod")

    # A missing pool fails fast with the SDK's own error, and the SDK rolls its claim back.
    try:
        sdk.create_sandbox("no-such-pool", NS, sandbox_ready_timeout=20)
        raise AssertionError("create_sandbox from a missing pool succeeded")
    except SandboxWarmPoolNotFoundError:
        pass
    leftovers = custom.list_namespaced_custom_object(*EXT, NS, "sandboxclaims")["items"]
    wait_until("rolled-back claim gone", lambda: not custom.list_namespaced_custom_object(
        *EXT, NS, "sandboxclaims")["items"])
    step(f"missing pool raises SandboxWarmPoolNotFoundError ({len(leftovers)} claim(s) at raise)")

    # A pool whose template does not exist: the SDK's template error, and the claim rolled back.
    custom.create_namespaced_custom_object(*EXT, NS, "sandboxwarmpools", {
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxWarmPool",
        "metadata": {"name": "pool-without-template"},
        "spec": {"replicas": 0, "sandboxTemplateRef": {"name": "no-such-template"}},
    })
    try:
        sdk.create_sandbox("pool-without-template", NS, sandbox_ready_timeout=20)
        raise AssertionError("create_sandbox from a pool without template succeeded")
    except SandboxTemplateNotFoundError:
        pass
    wait_until("rolled-back claim gone", lambda: not custom.list_namespaced_custom_object(
        *EXT, NS, "sandboxclaims")["items"])
    step("missing template raises SandboxTemplateNotFoundError")

    # shutdown_after_seconds: the controller deletes the claim (and so its sandbox) at expiry.
    ttl = sdk.create_sandbox(cold_pool, NS, sandbox_ready_timeout=30, shutdown_after_seconds=2)
    claim = claim_of(custom, ttl.claim_name)
    assert claim["spec"]["lifecycle"]["shutdownPolicy"] == "Delete", claim["spec"]
    check_gone(custom, core, ttl.claim_name, ttl.sandbox_id)
    step("shutdown_after_seconds deletes claim, sandbox and pod")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(*sys.argv[1:]))
