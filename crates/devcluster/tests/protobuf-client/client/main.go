// Command client drives devcluster as a Go controller does: client-go's typed clientset with
// the protobuf content type (what client-go users such as controller-runtime and the
// kube-controller-manager set for built-in kinds). For a Pod, a Service and a NetworkPolicy it
// creates, gets, lists, watches, patches and deletes, and checks that every request body and
// every answer for these kinds was protobuf.
//
//	go run ./client KUBECONFIG
package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

const namespace = "default"

// exchange is one request and the media type of its answer.
type exchange struct {
	method, path, sent, answered string
}

type recorder struct {
	mu        sync.Mutex
	exchanges []exchange
	next      http.RoundTripper
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.next.RoundTrip(req)
	if err == nil {
		r.mu.Lock()
		r.exchanges = append(r.exchanges, exchange{
			method:   req.Method,
			path:     req.URL.Path,
			sent:     req.Header.Get("Content-Type"),
			answered: resp.Header.Get("Content-Type"),
		})
		r.mu.Unlock()
	}
	return resp, err
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "FAIL: "+format+"\n", args...)
	os.Exit(1)
}

// lifecycle runs create, get, list, watch, patch and delete for one kind.
type lifecycle struct {
	kind   string
	create func(ctx context.Context) (metav1.Object, error)
	get    func(ctx context.Context) (metav1.Object, error)
	list   func(ctx context.Context) (int, string, error)
	watch  func(ctx context.Context, rv string) (watch.Interface, error)
	patch  func(ctx context.Context, data []byte) (metav1.Object, error)
	delete func(ctx context.Context) error
}

func run(ctx context.Context, l lifecycle) {
	made, err := l.create(ctx)
	if err != nil {
		fail("%s create: %v", l.kind, err)
	}
	if made.GetUID() == "" || made.GetResourceVersion() == "" {
		fail("%s create: no uid or resourceVersion in the answer", l.kind)
	}
	got, err := l.get(ctx)
	if err != nil || got.GetUID() != made.GetUID() {
		fail("%s get: %v (uid %q, want %q)", l.kind, err, got.GetUID(), made.GetUID())
	}
	if got.GetLabels()["app"] != "proto" {
		fail("%s get: labels %v", l.kind, got.GetLabels())
	}
	count, rv, err := l.list(ctx)
	if err != nil || count != 1 || rv == "" {
		fail("%s list: %v (%d items, resourceVersion %q)", l.kind, err, count, rv)
	}
	w, err := l.watch(ctx, rv)
	if err != nil {
		fail("%s watch: %v", l.kind, err)
	}
	defer w.Stop()
	patched, err := l.patch(ctx, []byte(`{"metadata":{"labels":{"patched":"yes"}}}`))
	if err != nil || patched.GetLabels()["patched"] != "yes" {
		fail("%s patch: %v", l.kind, err)
	}
	if err := l.delete(ctx); err != nil {
		fail("%s delete: %v", l.kind, err)
	}
	sawPatch, sawDelete := false, false
	timeout := time.After(20 * time.Second)
	for !sawDelete {
		select {
		case event, ok := <-w.ResultChan():
			if !ok {
				fail("%s watch: closed early", l.kind)
			}
			if event.Type == watch.Error {
				fail("%s watch: error event %v", l.kind, event.Object)
			}
			obj, ok := event.Object.(metav1.Object)
			if !ok {
				fail("%s watch: unexpected object %T", l.kind, event.Object)
			}
			if event.Type == watch.Modified && obj.GetLabels()["patched"] == "yes" {
				sawPatch = true
			}
			if event.Type == watch.Deleted && obj.GetUID() == made.GetUID() {
				sawDelete = true
			}
		case <-timeout:
			fail("%s watch: no DELETED event (patch seen: %v)", l.kind, sawPatch)
		}
	}
	if !sawPatch {
		fail("%s watch: the patch was not seen", l.kind)
	}
	fmt.Printf("ok %s: create get list watch patch delete\n", l.kind)
}

func labels() map[string]string { return map[string]string{"app": "proto"} }

func main() {
	if len(os.Args) != 2 {
		fail("usage: client KUBECONFIG")
	}
	config, err := clientcmd.BuildConfigFromFlags("", os.Args[1])
	if err != nil {
		fail("kubeconfig: %v", err)
	}
	config.ContentType = runtime.ContentTypeProtobuf
	config.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	rec := &recorder{}
	config.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		rec.next = rt
		return rec
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		fail("client: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	selector := metav1.ListOptions{LabelSelector: "app=proto"}
	grace := int64(0)
	deleteNow := metav1.DeleteOptions{GracePeriodSeconds: &grace}

	pods := client.CoreV1().Pods(namespace)
	run(ctx, lifecycle{
		kind: "Pod",
		create: func(ctx context.Context) (metav1.Object, error) {
			return pods.Create(ctx, &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "proto-pod", Labels: labels()},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "c", Image: "busybox:1.36", Command: []string{"sleep", "3600"},
					Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
				}}},
			}, metav1.CreateOptions{})
		},
		get: func(ctx context.Context) (metav1.Object, error) {
			return pods.Get(ctx, "proto-pod", metav1.GetOptions{})
		},
		list: func(ctx context.Context) (int, string, error) {
			l, err := pods.List(ctx, selector)
			if err != nil {
				return 0, "", err
			}
			return len(l.Items), l.ResourceVersion, nil
		},
		watch: func(ctx context.Context, rv string) (watch.Interface, error) {
			return pods.Watch(ctx, metav1.ListOptions{LabelSelector: "app=proto", ResourceVersion: rv})
		},
		patch: func(ctx context.Context, data []byte) (metav1.Object, error) {
			return pods.Patch(ctx, "proto-pod", types.StrategicMergePatchType, data, metav1.PatchOptions{})
		},
		delete: func(ctx context.Context) error { return pods.Delete(ctx, "proto-pod", deleteNow) },
	})

	services := client.CoreV1().Services(namespace)
	run(ctx, lifecycle{
		kind: "Service",
		create: func(ctx context.Context) (metav1.Object, error) {
			return services.Create(ctx, &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Name: "proto-svc", Labels: labels()},
				Spec: corev1.ServiceSpec{
					Selector: labels(),
					Ports: []corev1.ServicePort{{
						Name: "http", Port: 80, TargetPort: intstr.FromString("http"),
					}},
				},
			}, metav1.CreateOptions{})
		},
		get: func(ctx context.Context) (metav1.Object, error) {
			s, err := services.Get(ctx, "proto-svc", metav1.GetOptions{})
			if err == nil && (s.Spec.ClusterIP == "" || s.Spec.Ports[0].TargetPort.StrVal != "http") {
				return nil, fmt.Errorf("clusterIP %q, targetPort %v", s.Spec.ClusterIP, s.Spec.Ports[0].TargetPort)
			}
			return s, err
		},
		list: func(ctx context.Context) (int, string, error) {
			l, err := services.List(ctx, selector)
			if err != nil {
				return 0, "", err
			}
			return len(l.Items), l.ResourceVersion, nil
		},
		watch: func(ctx context.Context, rv string) (watch.Interface, error) {
			return services.Watch(ctx, metav1.ListOptions{LabelSelector: "app=proto", ResourceVersion: rv})
		},
		patch: func(ctx context.Context, data []byte) (metav1.Object, error) {
			return services.Patch(ctx, "proto-svc", types.MergePatchType, data, metav1.PatchOptions{})
		},
		delete: func(ctx context.Context) error {
			return services.Delete(ctx, "proto-svc", metav1.DeleteOptions{})
		},
	})

	policies := client.NetworkingV1().NetworkPolicies(namespace)
	udp := corev1.ProtocolUDP
	dns := intstr.FromInt32(53)
	run(ctx, lifecycle{
		kind: "NetworkPolicy",
		create: func(ctx context.Context) (metav1.Object, error) {
			return policies.Create(ctx, &networkingv1.NetworkPolicy{
				ObjectMeta: metav1.ObjectMeta{Name: "proto-np", Labels: labels()},
				Spec: networkingv1.NetworkPolicySpec{
					PodSelector: metav1.LabelSelector{MatchLabels: labels()},
					PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
					Egress: []networkingv1.NetworkPolicyEgressRule{{
						Ports: []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: &dns}},
						To: []networkingv1.NetworkPolicyPeer{{
							IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0", Except: []string{"169.254.169.254/32"}},
						}},
					}},
				},
			}, metav1.CreateOptions{})
		},
		get: func(ctx context.Context) (metav1.Object, error) {
			p, err := policies.Get(ctx, "proto-np", metav1.GetOptions{})
			if err == nil && (len(p.Spec.Egress) != 1 || p.Spec.Egress[0].Ports[0].Port.IntVal != 53 ||
				p.Spec.Egress[0].To[0].IPBlock.Except[0] != "169.254.169.254/32") {
				return nil, fmt.Errorf("egress %+v", p.Spec.Egress)
			}
			return p, err
		},
		list: func(ctx context.Context) (int, string, error) {
			l, err := policies.List(ctx, selector)
			if err != nil {
				return 0, "", err
			}
			return len(l.Items), l.ResourceVersion, nil
		},
		watch: func(ctx context.Context, rv string) (watch.Interface, error) {
			return policies.Watch(ctx, metav1.ListOptions{LabelSelector: "app=proto", ResourceVersion: rv})
		},
		patch: func(ctx context.Context, data []byte) (metav1.Object, error) {
			return policies.Patch(ctx, "proto-np", types.MergePatchType, data, metav1.PatchOptions{})
		},
		delete: func(ctx context.Context) error {
			return policies.Delete(ctx, "proto-np", metav1.DeleteOptions{})
		},
	})

	// Every body sent and every answer for these kinds was protobuf.
	rec.mu.Lock()
	defer rec.mu.Unlock()
	counted := 0
	for _, x := range rec.exchanges {
		if !strings.Contains(x.path, "/pods") && !strings.Contains(x.path, "/services") &&
			!strings.Contains(x.path, "/networkpolicies") {
			continue
		}
		counted++
		if (x.method == http.MethodPost || x.method == http.MethodDelete) && x.sent != runtime.ContentTypeProtobuf {
			fail("%s %s sent %q", x.method, x.path, x.sent)
		}
		if !strings.HasPrefix(x.answered, runtime.ContentTypeProtobuf) {
			fail("%s %s answered %q", x.method, x.path, x.answered)
		}
	}
	fmt.Printf("ok protobuf: %d requests, every answer protobuf\n", counted)
}
