"""Drives the published k8s-agent-sandbox SDK against devcluster and both controllers.

Usage: sdk_roundtrip.py WARM_POOL COLD_POOL. Prints one JSON line per created sandbox.
"""
import json
import sys

from k8s_agent_sandbox import SandboxClient
from k8s_agent_sandbox.models import SandboxDirectConnectionConfig

warm_pool, cold_pool = sys.argv[1], sys.argv[2]
# Direct mode: no port-forward; nothing in this script talks to the sandbox process.
client = SandboxClient(connection_config=SandboxDirectConnectionConfig(api_url="http://127.0.0.1:9"))
for pool in (warm_pool, cold_pool):
    sb = client.create_sandbox(
        pool,
        "default",
        sandbox_ready_timeout=60,
        labels={"acceptance": "yes"},
        pod_labels={"sandbox.users.io/client-id": "t"},
    )
    listed = [getattr(s, "claim_name", s) for s in client.list_all_sandboxes("default", "acceptance=yes")]
    print(json.dumps({
        "pool": pool,
        "claim": sb.claim_name,
        "sandbox": sb.sandbox_id,
        "status": sb.status()[0],
        "pod_ip": sb.get_pod_ip(),
        "pod_name": sb.get_pod_name(),
        "listed": sb.claim_name in json.dumps(listed, default=str),
    }), flush=True)
    sb.terminate()
