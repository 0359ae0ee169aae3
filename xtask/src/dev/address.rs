//! devcluster's address across restarts of `cargo xtask dev` in the same directory: the port of
//! the last run is remembered in `<dir>/devcluster.port` and asked for again, so controllers
//! started by hand against the old kubeconfig (`--no-controllers`) reconnect to the new
//! devcluster. When that port is taken, devcluster gets a free one and the run says so.

use std::net::{Ipv4Addr, SocketAddrV4, TcpListener};
use std::path::Path;

/// File (in the dev directory) holding the last devcluster port.
pub const PORT_FILE: &str = "devcluster.port";

/// Which port devcluster is asked to listen on, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortChoice {
    /// No earlier run in this directory: a free port.
    First,
    /// The port of the last run, free again.
    Same(u16),
    /// The last run's port is in use now: a free one instead.
    Taken(u16),
}

impl PortChoice {
    /// The `--listen` port (0: let the OS pick).
    pub fn port(self) -> u16 {
        match self {
            PortChoice::Same(port) => port,
            PortChoice::First | PortChoice::Taken(_) => 0,
        }
    }

    /// How the address relates to the last run, for the progress line.
    pub fn describe(self, serving: u16) -> String {
        match self {
            PortChoice::First => "first run in this directory; later runs reuse the port".into(),
            PortChoice::Same(port) if port == serving => {
                "the same address as the last run in this directory".into()
            }
            PortChoice::Same(port) | PortChoice::Taken(port) => format!(
                "a new address: port {port} of the last run is in use; restart controllers \
                 you started by hand"
            ),
        }
    }
}

/// The port to ask for: the remembered one when it is free now.
pub fn choose(dir: &Path) -> PortChoice {
    let remembered = std::fs::read_to_string(dir.join(PORT_FILE))
        .ok()
        .and_then(|text| text.trim().parse::<u16>().ok())
        .filter(|port| *port != 0);
    match remembered {
        None => PortChoice::First,
        Some(port) if is_free(port) => PortChoice::Same(port),
        Some(port) => PortChoice::Taken(port),
    }
}

/// Whether 127.0.0.1:`port` can be bound right now.
pub fn is_free(port: u16) -> bool {
    TcpListener::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port)).is_ok()
}

/// Records the port devcluster serves on for the next run (best effort).
pub fn remember(dir: &Path, port: u16) {
    let _ = std::fs::write(dir.join(PORT_FILE), format!("{port}\n"));
}

/// The port of the server URL in a kubeconfig's text (its first cluster).
pub fn served_port(kubeconfig: &str) -> Option<u16> {
    let parsed = kube::config::Kubeconfig::from_yaml(kubeconfig).ok()?;
    let server = parsed.clusters.first()?.cluster.as_ref()?.server.clone()?;
    let uri: http::Uri = server.parse().ok()?;
    uri.port_u16()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_port_is_reused_when_free_and_replaced_when_taken() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(choose(dir.path()), PortChoice::First);
        assert_eq!(PortChoice::First.port(), 0);

        let held = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = held.local_addr().unwrap().port();
        remember(dir.path(), port);
        assert_eq!(choose(dir.path()), PortChoice::Taken(port));
        assert_eq!(PortChoice::Taken(port).port(), 0);
        drop(held);
        assert_eq!(choose(dir.path()), PortChoice::Same(port));
        assert_eq!(PortChoice::Same(port).port(), port);
        assert!(
            PortChoice::Same(port)
                .describe(port)
                .starts_with("the same address")
        );
        assert!(PortChoice::Taken(port).describe(4000).contains("in use"));
    }

    #[test]
    fn the_port_is_read_from_the_kubeconfig_server() {
        let kubeconfig = "apiVersion: v1\nkind: Config\nclusters:\n- name: devcluster\n  cluster:\n    server: http://127.0.0.1:43123\ncontexts: []\nusers: []\n";
        assert_eq!(served_port(kubeconfig), Some(43123));
        assert_eq!(served_port("not yaml: ["), None);
    }
}
