//! The controller flags as chart values: `templates/_flags.tpl`, generated from the binaries'
//! clap definitions (the same `Command` that prints `--help` and writes the flags tables of
//! docs/configuration.md), so every flag of either controller is settable and none can be
//! forgotten.
//!
//! A flag `--sandbox-concurrent-workers` is the key `sandboxConcurrentWorkers`:
//! - `sandboxController.flags.<key>` / `extensionsController.flags.<key>`: that controller only;
//! - `controller.<key>`: every controller that has the flag (the reference chart's `controller`
//!   keys are exactly these names, so its values files keep working).
//!
//! The metrics and probe addresses are set from `<controller>.metricsPort` / `healthPort`
//! (they must agree with the container ports); `--extensions` is the `extensions.enabled`
//! switch (and the reference's `controller.extensions`).

use crate::docs::{Flag, flags_of};

/// One controller of the chart.
#[derive(Debug, Clone)]
pub struct Controller {
    /// Key of its values (`sandboxController`).
    pub key: &'static str,
    /// Binary, image and object name (`sandbox-controller`).
    pub binary: &'static str,
    /// Its flags, in `--help` order.
    pub flags: Vec<Flag>,
}

/// The two controllers, core first.
pub fn controllers() -> [Controller; 2] {
    use clap::CommandFactory;
    [
        Controller {
            key: "sandboxController",
            binary: "sandbox-controller",
            flags: flags_of(&sandbox_controller::args::Args::command()),
        },
        Controller {
            key: "extensionsController",
            binary: "extensions-controller",
            flags: flags_of(&extensions_controller::args::Args::command()),
        },
    ]
}

/// Flags whose value comes from another chart value, never from `flags`.
pub const PORT_FLAGS: [(&str, &str); 2] = [
    ("--metrics-bind-address", "metricsPort"),
    ("--health-probe-bind-address", "healthPort"),
];

/// Flags the chart does not expose as values (`--extensions` is the `extensions.enabled`
/// switch).
pub const NOT_VALUES: [&str; 1] = ["--extensions"];

/// Keys of the reference chart's `controller` map that are no flag of ours, and what becomes
/// of them (README "Values of the reference chart").
pub const REFERENCE_ONLY_KEYS: [&str; 7] = [
    "extensions",
    "extraArgs",
    "enableTracing",
    "enablePprof",
    "enablePprofDebug",
    "pprofBlockProfileRate",
    "pprofMutexProfileFraction",
];

/// `--sandbox-concurrent-workers` → `sandboxConcurrentWorkers`.
pub fn value_key(long: &str) -> String {
    let mut key = String::new();
    let mut upper = false;
    for c in long.trim_start_matches("--").chars() {
        if c == '-' {
            upper = true;
        } else if upper {
            key.push(c.to_ascii_uppercase());
            upper = false;
        } else {
            key.push(c);
        }
    }
    key
}

impl Controller {
    /// The flags settable through `flags` / `controller`, in `--help` order.
    pub fn value_flags(&self) -> impl Iterator<Item = &Flag> {
        self.flags.iter().filter(|flag| {
            !NOT_VALUES.contains(&flag.long.as_str())
                && !PORT_FLAGS.iter().any(|(long, _)| *long == flag.long)
        })
    }
}

fn quoted_list(items: impl IntoIterator<Item = String>) -> String {
    items
        .into_iter()
        .map(|item| format!("{item:?}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The flags a controller's release Deployment passes (`deploy/<binary>/deployment.yaml`), in
/// its order: `(--flag, value)`.
pub type PieceArgs = Vec<(String, String)>;

/// The namespace the pieces are written for; a flag value equal to it follows the chart's
/// namespace (`--webhook-namespace`).
pub const PIECE_NAMESPACE: &str = "agent-sandbox-system";

/// Flags only `<controller>.flags` may set: one value for both controllers would be wrong
/// (two webhook Services of one name; two controllers writing their certificates into one
/// Secret).
pub const PER_CONTROLLER_ONLY: [&str; 2] = ["--webhook-service-name", WEBHOOK_CERT_SECRET];

/// The flag naming the Secret of the webhook's certificate.
pub const WEBHOOK_CERT_SECRET: &str = "--webhook-cert-secret";

/// Flags whose value other objects of the chart follow, so each gets an
/// [`arg_template`] even when the release Deployment leaves it at its default:
/// `--webhook-cert-secret` is the Secret the certificate Role grants.
pub const FOLLOWED_FLAGS: [&str; 1] = [WEBHOOK_CERT_SECRET];

/// Name of the template that renders the value of a flag the release Deployment passes, or of
/// one of [`FOLLOWED_FLAGS`]: `<controller>.flags.<key>`, else `controller.<key>`, else the
/// Deployment's value (the flag's default).
pub fn arg_template(controller: &Controller, long: &str) -> String {
    format!("agent-sandbox.arg.{}.{}", controller.key, value_key(long))
}

/// The text of `templates/_flags.tpl`. `piece_args[i]` are the release Deployment's flags of
/// `controllers[i]`: they render first, in that order, with the Deployment's values as
/// defaults (so the default rendering is the Deployment), then every other flag that values set.
pub fn flags_template(controllers: &[Controller], piece_args: &[PieceArgs]) -> String {
    let mut out = String::from(
        "{{/*\nGenerated by `cargo xtask chart` from the controllers' flag definitions and the\n\
         release Deployments' args; do not edit.\n\
         \"agent-sandbox.args.<controller>\" renders the container args of one controller.\n*/}}\n",
    );

    // Every key `controller.*` may hold, and every flag name each controller knows (for the
    // reference's extraArgs, which are distributed to the controllers that know the flag).
    let mut shared: Vec<String> = REFERENCE_ONLY_KEYS.iter().map(|k| k.to_string()).collect();
    for controller in controllers {
        for flag in controller.value_flags() {
            let key = value_key(&flag.long);
            if !shared.contains(&key) && !PER_CONTROLLER_ONLY.contains(&flag.long.as_str()) {
                shared.push(key);
            }
        }
    }
    out.push_str(&format!(
        "{{{{- define \"agent-sandbox.controllerKeys\" -}}}}\n{{{{- list {} | toJson -}}}}\n{{{{- end }}}}\n\n",
        quoted_list(shared)
    ));

    for (controller, piece) in controllers.iter().zip(piece_args) {
        let key = controller.key;
        let keys = quoted_list(controller.value_flags().map(|f| value_key(&f.long)));
        let longs = quoted_list(controller.flags.iter().map(|f| f.long.clone()));
        out.push_str(&format!(
            "{{{{- define \"agent-sandbox.flagNames.{key}\" -}}}}\n{{{{- list {longs} | toJson -}}}}\n{{{{- end }}}}\n\n"
        ));
        // One template per flag of the Deployment (its value), and per flag other objects
        // follow (its default).
        let followed = controller
            .flags
            .iter()
            .filter(|flag| FOLLOWED_FLAGS.contains(&flag.long.as_str()))
            .filter(|flag| !piece.iter().any(|(long, _)| *long == flag.long))
            .map(|flag| (flag.long.clone(), flag.default.clone()));
        for (long, value) in piece.iter().cloned().chain(followed) {
            let (long, value) = (&long, &value);
            if PORT_FLAGS.iter().any(|(port, _)| port == long) {
                continue;
            }
            let name = value_key(long);
            let default = if value == PIECE_NAMESPACE {
                "{{- include \"agent-sandbox.namespace\" $ -}}".to_string()
            } else {
                value.clone()
            };
            let shared = if PER_CONTROLLER_ONLY.contains(&long.as_str()) {
                String::new()
            } else {
                format!(
                    "{{{{- else if hasKey $ref \"{name}\" -}}}}\n\
                     {{{{- include \"agent-sandbox.flagValue\" (index $ref \"{name}\") -}}}}\n"
                )
            };
            out.push_str(&format!(
                "{{{{- define \"{template}\" -}}}}\n\
                 {{{{- $flags := (index $.Values \"{key}\").flags | default dict -}}}}\n\
                 {{{{- $ref := $.Values.controller | default dict -}}}}\n\
                 {{{{- if hasKey $flags \"{name}\" -}}}}\n\
                 {{{{- include \"agent-sandbox.flagValue\" (index $flags \"{name}\") -}}}}\n\
                 {shared}\
                 {{{{- else -}}}}\n\
                 {default}\n\
                 {{{{- end -}}}}\n\
                 {{{{- end }}}}\n\n",
                template = arg_template(controller, long),
            ));
        }
        out.push_str(&format!(
            "{{{{- define \"agent-sandbox.args.{key}\" -}}}}\n\
             {{{{- $c := index $.Values \"{key}\" -}}}}\n\
             {{{{- $flags := $c.flags | default dict -}}}}\n\
             {{{{- $ref := $.Values.controller | default dict -}}}}\n\
             {{{{- $known := list {keys} -}}}}\n\
             {{{{- range $name, $_ := $flags }}}}\n\
             {{{{- if not (has $name $known) }}}}\n\
             {{{{- fail (printf \"{key}.flags.%s is not a flag of {binary}; its flag keys are: %s (docs/configuration.md lists what each does)\" $name (join \", \" $known)) }}}}\n\
             {{{{- end }}}}\n\
             {{{{- end }}}}\n\
             {{{{- $args := list -}}}}\n",
            binary = controller.binary,
        ));
        for (long, _) in piece {
            if let Some((_, port_key)) = PORT_FLAGS.iter().find(|(port, _)| port == long) {
                out.push_str(&format!(
                    "{{{{- $args = append $args (printf \"{long}=:%s\" (include \"agent-sandbox.flagValue\" $c.{port_key})) }}}}\n"
                ));
            } else {
                out.push_str(&format!(
                    "{{{{- $args = append $args (printf \"{long}=%s\" (include \"{template}\" $)) }}}}\n",
                    template = arg_template(controller, long),
                ));
            }
        }
        for flag in controller.value_flags() {
            if piece.iter().any(|(long, _)| *long == flag.long) {
                continue;
            }
            let name = value_key(&flag.long);
            let long = &flag.long;
            let shared = if PER_CONTROLLER_ONLY.contains(&long.as_str()) {
                String::new()
            } else {
                format!(
                    "{{{{- else if hasKey $ref \"{name}\" }}}}\n\
                     {{{{- $args = append $args (printf \"{long}=%s\" (include \"agent-sandbox.flagValue\" (index $ref \"{name}\"))) }}}}\n"
                )
            };
            out.push_str(&format!(
                "{{{{- if hasKey $flags \"{name}\" }}}}\n\
                 {{{{- $args = append $args (printf \"{long}=%s\" (include \"agent-sandbox.flagValue\" (index $flags \"{name}\"))) }}}}\n\
                 {shared}\
                 {{{{- end }}}}\n"
            ));
        }
        out.push_str(&format!(
            "{{{{- range (include \"agent-sandbox.referenceExtraArgs\" (list $ \"{key}\") | fromJsonArray) }}}}\n\
             {{{{- $args = append $args . }}}}\n\
             {{{{- end }}}}\n\
             {{{{- range $c.extraArgs }}}}\n\
             {{{{- $args = append $args . }}}}\n\
             {{{{- end }}}}\n\
             {{{{- toYaml $args }}}}\n\
             {{{{- end }}}}\n\n"
        ));
    }
    out
}

/// The flags of a release Deployment's first container: `--flag=value` items in order (a
/// flag without `=` is `true`).
pub fn piece_args(args: &[serde_json::Value], origin: &str) -> Result<PieceArgs, String> {
    args.iter()
        .map(|arg| {
            let text = arg
                .as_str()
                .filter(|text| text.starts_with("--"))
                .ok_or_else(|| format!("{origin}: argument {arg} is not a --flag"))?;
            Ok(match text.split_once('=') {
                Some((long, value)) => (long.to_string(), value.to_string()),
                None => (text.to_string(), "true".to_string()),
            })
        })
        .collect()
}

/// The commented list of flag keys under `<controller>.flags` in values.yaml.
pub fn flags_comment(controller: &Controller, piece: &PieceArgs, indent: usize) -> String {
    let pad = " ".repeat(indent);
    let mut out = String::new();
    for flag in controller.value_flags() {
        let default = if let Some((_, value)) = piece.iter().find(|(long, _)| *long == flag.long) {
            if value == PIECE_NAMESPACE {
                "(the chart's namespace)".to_string()
            } else {
                value.clone()
            }
        } else if flag.default.is_empty() {
            "(unset)".to_string()
        } else {
            flag.default.clone()
        };
        out.push_str(&format!(
            "{pad}# {key}: {default}    # {long}\n",
            key = value_key(&flag.long),
            long = flag.long,
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flag_names_become_camel_case_keys_like_the_reference_charts() {
        assert_eq!(value_key("--leader-elect"), "leaderElect");
        assert_eq!(
            value_key("--sandbox-warm-pool-readiness-grace-period"),
            "sandboxWarmPoolReadinessGracePeriod"
        );
        assert_eq!(value_key("--kube-api-qps"), "kubeApiQps");
    }

    #[test]
    fn every_flag_but_the_ports_and_extensions_is_a_value() {
        for controller in controllers() {
            let values: Vec<&str> = controller.value_flags().map(|f| f.long.as_str()).collect();
            assert!(values.contains(&"--leader-elect"), "{values:?}");
            assert!(values.contains(&"--kube-api-qps"), "{values:?}");
            assert!(!values.contains(&"--metrics-bind-address"));
            assert!(!values.contains(&"--extensions"));
            assert_eq!(
                values.len() + 3,
                controller.flags.len(),
                "{}",
                controller.key
            );
        }
    }
}
