//! What a simulated kubelet makes of a Pod's containers once they run, without running
//! anything: the command grammar ([`program`]: `true`, `false`, `sleep N`, `sh -c "...; exit
//! 2"`), the containers' exits, restarts by `restartPolicy` with the kubelet's back-off and
//! stops in the kubelet's order ([`kubelet`]), and the status a kubelet reports for them
//! ([`status`]).
//!
//! Pure functions only (a Pod and a time in, states, status patches and the next time something
//! is due out), shared by devcluster's simulated nodes and the real cluster's pod finisher
//! (`realcluster::finisher`, beside kwok), so a Pod finishes alike on both grounds. The grammar
//! is documented in `docs/devcluster.md`, "Containers that finish".

pub mod kubelet;
pub mod program;
pub mod status;
