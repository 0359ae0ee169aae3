// Command schema writes the protobuf field table devcluster uses to read and write the
// Kubernetes protobuf encoding of the built-in kinds it serves.
//
// It walks the Go types of client-go's scheme (k8s.io/api) by reflection and records, for every
// message reachable from the served kinds, each field's protobuf number, JSON name, value kind
// and how Go's encoding/json treats it (pointer, omitempty, inline). The table is facts about
// the API's types (field numbers and names), generated, not written by hand:
//
//	go run ./schema > ../../src/protobuf/schema.json
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"k8s.io/client-go/kubernetes/scheme"
)

// servedGroupVersions are the built-in group versions devcluster serves.
var servedGroupVersions = map[string]bool{
	"v1":                              true,
	"apps/v1":                         true,
	"networking.k8s.io/v1":            true,
	"coordination.k8s.io/v1":          true,
	"rbac.authorization.k8s.io/v1":    true,
	"policy/v1":                       true,
	"autoscaling/v1":                  true,
	"autoscaling/v2":                  true,
	"events.k8s.io/v1":                true,
	"meta.k8s.io/v1":                  true,
}

// special are types with a protobuf and JSON form of their own.
var special = map[string]string{
	"k8s.io/apimachinery/pkg/apis/meta/v1.Time":           "time",
	"k8s.io/apimachinery/pkg/apis/meta/v1.MicroTime":      "microtime",
	"k8s.io/apimachinery/pkg/apis/meta/v1.Duration":       "duration",
	"k8s.io/apimachinery/pkg/api/resource.Quantity":       "quantity",
	"k8s.io/apimachinery/pkg/util/intstr.IntOrString":     "intorstring",
	"k8s.io/apimachinery/pkg/runtime.RawExtension":        "raw",
	"k8s.io/apimachinery/pkg/apis/meta/v1.FieldsV1":       "raw",
}

// Field is one protobuf field: [number, json name, value, flags], where value is a scalar
// kind, "msg:NAME", a special kind, or for maps "map:KEY:VALUE"; flags hold "r" (repeated),
// "p" (pointer: present when set), "o" (omitempty), "i" (inline in JSON).
type Field [4]any

type table struct {
	Messages map[string][]Field `json:"messages"`
	Kinds    map[string]string  `json:"kinds"`
}

func typeName(t reflect.Type) string {
	return t.PkgPath() + "." + t.Name()
}

func shortName(t reflect.Type) string {
	path := strings.TrimPrefix(t.PkgPath(), "k8s.io/")
	path = strings.ReplaceAll(strings.ReplaceAll(path, "/", "."), "pkg.apis.", "")
	return path + "." + t.Name()
}

func main() {
	out := table{Messages: map[string][]Field{}, Kinds: map[string]string{}}
	var walk func(t reflect.Type) string
	walk = func(t reflect.Type) string {
		name := shortName(t)
		if _, done := out.Messages[name]; done {
			return name
		}
		out.Messages[name] = nil
		var fields []Field
		var collect func(t reflect.Type)
		collect = func(t reflect.Type) {
			for i := 0; i < t.NumField(); i++ {
				f := t.Field(i)
				jsonTag := f.Tag.Get("json")
				pbTag := f.Tag.Get("protobuf")
				if jsonTag == "-" {
					continue
				}
				jsonName, jsonOpts, _ := strings.Cut(jsonTag, ",")
				inline := strings.Contains(jsonOpts, "inline")
				if pbTag == "" {
					if inline && f.Type.Kind() == reflect.Struct && f.Type.Name() == "TypeMeta" {
						continue // apiVersion and kind are not in the message
					}
					if inline && f.Type.Kind() == reflect.Struct {
						collect(f.Type) // embedded without a field of its own
						continue
					}
					if f.Type.Kind() == reflect.Interface {
						continue
					}
					fmt.Fprintf(os.Stderr, "%s.%s has no protobuf tag\n", name, f.Name)
					os.Exit(1)
				}
				parts := strings.Split(pbTag, ",")
				number, err := strconv.Atoi(parts[1])
				if err != nil {
					panic(err)
				}
				flags := ""
				if strings.Contains(jsonOpts, "omitempty") {
					flags += "o"
				}
				if inline {
					flags += "i"
				}
				ft := f.Type
				if ft.Kind() == reflect.Pointer {
					flags += "p"
					ft = ft.Elem()
				}
				var value string
				switch {
				case ft.Kind() == reflect.Map:
					value = "map:" + valueKind(ft.Key(), walk) + ":" + valueKind(ft.Elem(), walk)
				case ft.Kind() == reflect.Slice && ft.Elem().Kind() != reflect.Uint8:
					flags += "r"
					value = valueKind(ft.Elem(), walk)
				default:
					value = valueKind(ft, walk)
				}
				fields = append(fields, Field{number, jsonName, value, flags})
			}
		}
		collect(t)
		sort.Slice(fields, func(i, j int) bool { return fields[i][0].(int) < fields[j][0].(int) })
		out.Messages[name] = fields
		return name
	}
	for gvk, t := range scheme.Scheme.AllKnownTypes() {
		gv := gvk.GroupVersion().String()
		if !servedGroupVersions[gv] || t.Kind() != reflect.Struct {
			continue
		}
		if _, ok := special[typeName(t)]; ok {
			continue
		}
		out.Kinds[gv+"/"+gvk.Kind] = walk(t)
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", " ")
	if err := enc.Encode(out); err != nil {
		panic(err)
	}
}

func valueKind(t reflect.Type, walk func(reflect.Type) string) string {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if s, ok := special[typeName(t)]; ok {
		return s
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "bool"
	case reflect.Int32:
		return "int32"
	case reflect.Int64, reflect.Int:
		return "int64"
	case reflect.Uint32:
		return "uint32"
	case reflect.Uint64:
		return "uint64"
	case reflect.Float64:
		return "double"
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return "bytes"
		}
		// A named list type (e.g. []string under a map value): a message with `items`.
		return "list:" + valueKind(t.Elem(), walk)
	case reflect.Struct:
		return "msg:" + walk(t)
	}
	fmt.Fprintf(os.Stderr, "unsupported type %s\n", t)
	os.Exit(1)
	return ""
}
