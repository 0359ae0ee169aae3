"""The published SDK's own tracing (its `tracing` extra) against both agent-sandbox controllers
exporting to the same OTLP receiver.

Usage: python sdk_trace_flow.py KUBECONFIG POOL OTLP_GRPC_ENDPOINT

Creates one claim from POOL with tracing on (service name `sandbox-client`), waits for it to be
Ready, flushes the SDK's spans to the receiver and prints `claim NAME` and `trace-context JSON`
(the annotation the SDK wrote), then `ok traced claim Ready`. The Rust side
(`tests/tests/otel_traces.rs`) checks the spans the receiver got.
"""
import os
import sys

from kubernetes import client, config
from k8s_agent_sandbox import SandboxClient
from k8s_agent_sandbox.models import SandboxDirectConnectionConfig, SandboxTracerConfig
from opentelemetry import trace

EXT = ("extensions.agents.x-k8s.io", "v1beta1")
NS = "default"


def main(kubeconfig, pool, endpoint):
    # Read by the SDK's OTLP exporter when the client turns tracing on.
    os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint
    api_client = config.new_client_from_config(config_file=kubeconfig)
    custom = client.CustomObjectsApi(api_client)
    sdk = SandboxClient(
        connection_config=SandboxDirectConnectionConfig(api_url="http://127.0.0.1:9"),
        tracer_config=SandboxTracerConfig(enable_tracing=True, trace_service_name="sandbox-client"),
        api_client=api_client,
    )
    sb = sdk.create_sandbox(pool, NS, sandbox_ready_timeout=30)
    claim = custom.get_namespaced_custom_object(*EXT, NS, "sandboxclaims", sb.claim_name)
    annotations = claim["metadata"].get("annotations") or {}
    trace_context = annotations.get("opentelemetry.io/trace-context")
    assert trace_context, f"the SDK wrote no trace context: {annotations}"
    print(f"claim {sb.claim_name}", flush=True)
    print(f"trace-context {trace_context}", flush=True)
    provider = trace.get_tracer_provider()
    assert provider.force_flush(10_000), "the SDK's spans were not flushed"
    print("ok traced claim Ready", flush=True)


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(*sys.argv[1:])
