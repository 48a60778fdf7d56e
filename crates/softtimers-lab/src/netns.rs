//! Two network namespaces joined by a veth pair, made for one experiment and removed after
//! it, so that paced packets cross a real (virtual) link and a queueing discipline instead of
//! loopback.
//!
//! The sender's end has a token-bucket filter (`tbf`) at the link's rate with a bucket of two
//! frames: a 1 Gbit/s link serialises frames 12 µs apart as a wire would, and a burst from an
//! unpaced sender queues there. Where `tbf` is missing the link is left without a qdisc and
//! [`VethLink::qdisc`] says so.
//!
//! Making namespaces needs root (`CAP_SYS_ADMIN` and `CAP_NET_ADMIN`) and iproute2's `ip`;
//! [`VethLink::create`] says plainly which is missing.

use std::ffi::OsStr;
use std::net::Ipv4Addr;
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::tools;

/// Which end of the link a program runs at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// The sending namespace (the qdisc is on its veth end).
    Sender,
    /// The receiving namespace.
    Receiver,
}

/// A veth pair between two fresh namespaces; both go away when this is dropped.
#[derive(Debug)]
pub struct VethLink {
    sender_ns: String,
    receiver_ns: String,
    receiver_if: String,
    /// The sending end's address.
    pub sender_addr: Ipv4Addr,
    /// The receiving end's address.
    pub receiver_addr: Ipv4Addr,
    /// The qdisc on the sending end, as `tc` was told (or why there is none).
    pub qdisc: String,
}

/// The link rate of the sender's `tbf`, bit/s.
pub const LINK_RATE_BPS: u64 = 1_000_000_000;

fn run(args: &[&str]) -> Result<()> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .with_context(|| format!("running {}", args.join(" ")))?;
    if !out.status.success() {
        bail!(
            "`{}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

impl VethLink {
    /// Makes the namespaces and the link, or says why it cannot (not root, no `ip`, no
    /// namespace support). `tag` keeps the names of concurrent runs apart.
    pub fn create(tag: &str) -> Result<VethLink> {
        if !rustix::process::geteuid().is_root() {
            bail!("a veth link between network namespaces needs root");
        }
        tools::require("ip", "iproute2")?;
        let id = format!("{tag}{}", std::process::id());
        let mut link = VethLink {
            sender_ns: format!("st-{id}-s"),
            receiver_ns: format!("st-{id}-r"),
            receiver_if: format!("stv{}r", std::process::id()),
            sender_addr: Ipv4Addr::new(10, 199, 0, 1),
            receiver_addr: Ipv4Addr::new(10, 199, 0, 2),
            qdisc: String::new(),
        };
        let sender_if = format!("stv{}s", std::process::id());
        // Should a step fail, dropping `link` removes whatever was made.
        run(&["ip", "netns", "add", &link.sender_ns])?;
        run(&["ip", "netns", "add", &link.receiver_ns])?;
        run(&[
            "ip",
            "link",
            "add",
            &sender_if,
            "netns",
            &link.sender_ns,
            "type",
            "veth",
            "peer",
            "name",
            &link.receiver_if,
            "netns",
            &link.receiver_ns,
        ])?;
        for (ns, dev, addr) in [
            (&link.sender_ns, &sender_if, link.sender_addr),
            (&link.receiver_ns, &link.receiver_if, link.receiver_addr),
        ] {
            run(&[
                "ip",
                "-n",
                ns,
                "addr",
                "add",
                &format!("{addr}/30"),
                "dev",
                dev,
            ])?;
            run(&["ip", "-n", ns, "link", "set", dev, "up"])?;
            run(&["ip", "-n", ns, "link", "set", "lo", "up"])?;
        }
        let rate = format!("{}bit", LINK_RATE_BPS);
        let tbf = [
            "tc",
            "-n",
            &link.sender_ns,
            "qdisc",
            "add",
            "dev",
            &sender_if,
            "root",
            "tbf",
            "rate",
            &rate,
            "burst",
            "3028",
            "latency",
            "5ms",
        ];
        link.qdisc = match tools::find("tc").map(|_| run(&tbf)) {
            Some(Ok(())) => format!(
                "tbf rate {} Gbit/s, bucket 2 frames, on the sender's end",
                LINK_RATE_BPS / 1_000_000_000
            ),
            Some(Err(e)) => format!("none (tbf refused: {e:#})"),
            None => "none (tc is not installed)".to_string(),
        };
        Ok(link)
    }

    /// The receiving end's interface name (what a capture there listens on).
    pub fn receiver_interface(&self) -> &str {
        &self.receiver_if
    }

    /// `program args…` to run inside `end`'s namespace.
    pub fn command(&self, end: End, program: impl AsRef<OsStr>) -> Command {
        let mut command = Command::new("ip");
        command
            .args(["netns", "exec"])
            .arg(match end {
                End::Sender => &self.sender_ns,
                End::Receiver => &self.receiver_ns,
            })
            .arg(program);
        command
    }
}

impl Drop for VethLink {
    fn drop(&mut self) {
        // Deleting a namespace deletes the veth end in it, and with it the pair.
        for ns in [&self.sender_ns, &self.receiver_ns] {
            let _ = Command::new("ip")
                .args(["netns", "del", ns])
                .stderr(std::process::Stdio::null())
                .status();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Root only; elsewhere `create` must refuse with a reason.
    #[test]
    fn makes_a_link_with_addresses_and_qdisc_and_removes_it() {
        let link = match VethLink::create("t") {
            Ok(link) => link,
            Err(e) if !rustix::process::geteuid().is_root() => {
                assert!(format!("{e}").contains("needs root"), "{e}");
                return;
            }
            Err(e) => panic!("as root, the link should be made: {e:#}"),
        };
        let ns = link.receiver_ns.clone();
        let shown = link
            .command(End::Receiver, "ip")
            .args(["-brief", "addr", "show", "dev", link.receiver_interface()])
            .output()
            .unwrap();
        let shown = String::from_utf8_lossy(&shown.stdout);
        assert!(shown.contains("10.199.0.2/30"), "{shown}");
        assert!(shown.contains("UP"), "{shown}");
        assert!(link.qdisc.starts_with("tbf"), "{}", link.qdisc);
        drop(link);
        let list = Command::new("ip").args(["netns", "list"]).output().unwrap();
        assert!(
            !String::from_utf8_lossy(&list.stdout).contains(&ns),
            "the namespace outlived its link"
        );
    }
}
