"""Drives devcluster with the Python `kubernetes` client, as the agent-sandbox SDK does.

Usage: python client_check.py KUBECONFIG
Exits non-zero (with a message) on the first behaviour that differs from a real API server.
"""
import sys

from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

GROUP, VERSION, PLURAL = "agents.x-k8s.io", "v1beta1", "sandboxes"


def expect_status(code, fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except ApiException as e:
        assert e.status == code, f"expected {code}, got {e.status}: {e.body}"
        return
    raise AssertionError(f"expected HTTP {code}, call succeeded")


def main(kubeconfig):
    config.load_kube_config(config_file=kubeconfig)
    core = client.CoreV1Api()
    custom = client.CustomObjectsApi()

    names = [n.metadata.name for n in core.list_namespace().items]
    for ns in ("default", "kube-system", "agent-sandbox-system"):
        assert ns in names, names

    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Sandbox",
        "metadata": {"name": "py-box", "labels": {"owner": "python"}},
        "spec": {"podTemplate": {"spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}}},
    }
    made = custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, body)
    assert made["metadata"]["uid"] and made["metadata"]["resourceVersion"], made
    assert made["metadata"]["generation"] == 1
    expect_status(409, custom.create_namespaced_custom_object, GROUP, VERSION, "default", PLURAL, body)

    listed = custom.list_namespaced_custom_object(
        GROUP, VERSION, "default", PLURAL, label_selector="owner=python"
    )
    assert [i["metadata"]["name"] for i in listed["items"]] == ["py-box"], listed
    assert listed["metadata"]["resourceVersion"]
    by_name = custom.list_namespaced_custom_object(
        GROUP, VERSION, "default", PLURAL, field_selector="metadata.name=py-box"
    )
    assert len(by_name["items"]) == 1

    rv = made["metadata"]["resourceVersion"]
    patched = custom.patch_namespaced_custom_object(
        GROUP, VERSION, "default", PLURAL, "py-box", {"metadata": {"labels": {"step": "2"}}}
    )
    assert patched["metadata"]["labels"]["step"] == "2"

    w = watch.Watch()
    seen = []
    for event in w.stream(
        custom.list_namespaced_custom_object,
        GROUP, VERSION, "default", PLURAL,
        resource_version=rv, timeout_seconds=2,
    ):
        seen.append((event["type"], event["object"]["metadata"]["name"]))
        break
    assert seen == [("MODIFIED", "py-box")], seen

    status = custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, "default", PLURAL, "py-box", {"status": {"podIPs": ["127.0.0.5"]}}
    )
    assert status["status"]["podIPs"] == ["127.0.0.5"]

    expect_status(
        409,
        custom.delete_namespaced_custom_object,
        GROUP, VERSION, "default", PLURAL, "py-box",
        body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid="wrong")),
    )
    custom.delete_namespaced_custom_object(
        GROUP, VERSION, "default", PLURAL, "py-box",
        body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=made["metadata"]["uid"])),
    )
    expect_status(404, custom.get_namespaced_custom_object, GROUP, VERSION, "default", PLURAL, "py-box")

    cm = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="py-cm"), data={"a": "b"})
    core.create_namespaced_config_map("default", cm)
    assert core.read_namespaced_config_map("py-cm", "default").data == {"a": "b"}
    print("python client check passed")


if __name__ == "__main__":
    main(sys.argv[1])
