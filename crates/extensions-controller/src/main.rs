//! `extensions-controller`: the agent-sandbox extensions controller binary.

fn main() {}
