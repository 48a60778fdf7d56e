//! Network namespaces joined by veth pairs, made for one experiment and removed after it, so
//! that packets cross real (virtual) links and queueing disciplines instead of loopback:
//!
//! - [`VethLink`]: two namespaces, one link, a 1 Gbit/s `tbf` on the sender's end (the paced
//!   senders against iperf3);
//! - [`ForwardPath`]: source → router → sink, two links, for the forwarding experiments; the
//!   router's next hop is a phantom address with a permanent neighbour entry, as the livelock
//!   paper fooled its router's ARP table, so forwarded packets leave on the wire and are
//!   dropped by the sink's interface without a receiving process or ICMP replies.
//!
//! Names carry the process id (`st-<tag>-<pid>-<role>`), so concurrent runs do not collide.
//! Every namespace is removed when its owner is dropped (also on an error or a panic), by
//! [`remove_live`] on Ctrl-C (the lab's handler calls it), and a later run removes what a
//! killed one left ([`remove_stale`]).
//!
//! Making namespaces needs root (`CAP_SYS_ADMIN` and `CAP_NET_ADMIN`) and iproute2's `ip`;
//! the constructors say plainly which is missing.

use std::ffi::OsStr;
use std::net::Ipv4Addr;
use std::process::Command;
use std::sync::Mutex;

use anyhow::{Context, Result, bail};

use crate::process;

/// Namespaces made and not yet removed, for [`remove_live`].
static LIVE: Mutex<Vec<String>> = Mutex::new(Vec::new());

pub(crate) fn run(args: &[&str]) -> Result<()> {
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

fn delete_namespace(ns: &str) {
    let _ = Command::new("ip")
        .args(["netns", "del", ns])
        .stderr(std::process::Stdio::null())
        .status();
}

/// Removes every namespace this process made and has not removed yet (for a Ctrl-C handler:
/// deleting a namespace deletes the veth ends in it, and with them the pairs).
pub fn remove_live() {
    let names: Vec<String> = std::mem::take(&mut *LIVE.lock().unwrap_or_else(|e| e.into_inner()));
    for ns in names {
        delete_namespace(&ns);
    }
}

/// Removes namespaces an earlier run left behind when it was killed (named by this module,
/// with the id of a process that no longer exists). Returns how many.
pub fn remove_stale() -> usize {
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
        return 0;
    };
    let mut removed = 0;
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        let mut parts = name.split('-');
        let (Some("st"), Some(_tag), Some(pid), Some(_role), None) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            continue;
        };
        let Ok(pid) = pid.parse::<u32>() else {
            continue;
        };
        if pid != std::process::id() && !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            delete_namespace(name);
            removed += 1;
        }
    }
    removed
}

/// Checks that namespaces can be made here at all: root, and iproute2's `ip`.
pub fn check_available() -> Result<()> {
    if !rustix::process::geteuid().is_root() {
        bail!("network namespaces need root");
    }
    process::require("ip", "iproute2")?;
    Ok(())
}

/// A set of namespaces, removed together on drop.
#[derive(Debug)]
pub(crate) struct Namespaces {
    pub(crate) names: Vec<String>,
}

impl Namespaces {
    /// Makes `st-<tag>-<pid>-<role>` for each role; refuses a name that exists already.
    pub(crate) fn create(tag: &str, roles: &[&str]) -> Result<Namespaces> {
        check_available()?;
        remove_stale();
        let mut made = Namespaces { names: Vec::new() };
        for role in roles {
            let name = format!("st-{tag}-{}-{role}", std::process::id());
            if std::path::Path::new("/run/netns").join(&name).exists() {
                bail!(
                    "network namespace {name} exists already: is another run of this process still going?"
                );
            }
            run(&["ip", "netns", "add", &name])?;
            LIVE.lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(name.clone());
            made.names.push(name.clone());
            // No IPv6: its link-local chatter (router solicitations, MLD reports) would add
            // packets of its own to the links the experiments count.
            run(&[
                "ip",
                "netns",
                "exec",
                &name,
                "sysctl",
                "-qw",
                "net.ipv6.conf.all.disable_ipv6=1",
                "net.ipv6.conf.default.disable_ipv6=1",
            ])?;
        }
        Ok(made)
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        let mut live = LIVE.lock().unwrap_or_else(|e| e.into_inner());
        for ns in &self.names {
            delete_namespace(ns);
            live.retain(|n| n != ns);
        }
    }
}

/// `ip netns exec NS program`.
pub(crate) fn command_in(ns: &str, program: impl AsRef<OsStr>) -> Command {
    let mut command = Command::new("ip");
    command.args(["netns", "exec", ns]).arg(program);
    command
}

/// Whether a server's socket has local `port` in the network namespace whose `/proc/.../net`
/// directory is `proc_net` (`/proc/net` for the caller's own, `/proc/PID/net` for a
/// process's): a UDP socket (IPv4 or IPv6) bound to it, or a TCP socket listening on it. A
/// TCP connection's port (a client's, or one in `TIME_WAIT`) does not count.
///
/// ```
/// use softtimers_tools::netns::port_bound;
/// let proc_net = std::path::Path::new("/proc/net");
/// let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
/// assert!(port_bound(proc_net, socket.local_addr().unwrap().port()));
/// let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
/// assert!(port_bound(proc_net, listener.local_addr().unwrap().port()));
/// // A connection's own port is not a server's (unless a UDP socket, of another test, say,
/// // happens to hold the same number).
/// let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
/// let port = client.local_addr().unwrap().port();
/// assert!(!port_bound(proc_net, port) || std::net::UdpSocket::bind(("127.0.0.1", port)).is_err());
/// ```
pub fn port_bound(proc_net: &std::path::Path, port: u16) -> bool {
    [
        ("udp", false),
        ("udp6", false),
        ("tcp", true),
        ("tcp6", true),
    ]
    .iter()
    .any(|&(table, must_listen)| {
        let mut rows = rows_on_port(&proc_net.join(table), port).into_iter();
        rows.any(|row| !must_listen || row.state == "0A")
    })
}

/// Whether process `pid` itself holds a UDP socket (IPv4 or IPv6) bound to local `port`.
/// [`port_bound`] answers for the whole namespace, another process's sockets among them;
/// here a socket counts only if its inode is one of `pid`'s open descriptors.
///
/// ```
/// use softtimers_tools::netns::holds_udp_port;
/// let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
/// let port = socket.local_addr().unwrap().port();
/// assert!(holds_udp_port(std::process::id(), port));
/// drop(socket);
/// assert!(!holds_udp_port(std::process::id(), port));
/// ```
pub fn holds_udp_port(pid: u32, port: u16) -> bool {
    let proc_net = std::path::PathBuf::from(format!("/proc/{pid}/net"));
    let sockets: Vec<String> = ["udp", "udp6"]
        .iter()
        .flat_map(|table| rows_on_port(&proc_net.join(table), port))
        .map(|row| format!("socket:[{}]", row.inode))
        .collect();
    !sockets.is_empty()
        && std::fs::read_dir(format!("/proc/{pid}/fd")).is_ok_and(|fds| {
            fds.flatten().any(|fd| {
                std::fs::read_link(fd.path())
                    .is_ok_and(|target| sockets.iter().any(|s| target.as_os_str() == s.as_str()))
            })
        })
}

/// A socket of a `/proc/.../net` table: its state (`0A`: TCP_LISTEN) and inode.
struct SocketRow {
    state: String,
    inode: String,
}

/// The sockets of the table at `path` whose local port is `port`. A row's second column is
/// the local address, `HEXADDR:HEXPORT` with the port as `%04X`, its fourth the state and its
/// tenth the inode.
fn rows_on_port(path: &std::path::Path, port: u16) -> Vec<SocketRow> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    let suffix = format!(":{port:04X}");
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            match (fields.get(1), fields.get(3), fields.get(9)) {
                (Some(local), Some(state), Some(inode)) if local.ends_with(&suffix) => {
                    Some(SocketRow {
                        state: state.to_string(),
                        inode: inode.to_string(),
                    })
                }
                _ => None,
            }
        })
        .collect()
}

/// Waits until `child`, started with [`command_in`] in namespace `ns`, has a UDP socket
/// bound to local `port` or a TCP socket listening on it ([`port_bound`]): a server is ready when its socket is, with no fixed sleep to
/// guess at. Returns `Ok(false)` if the child exited first, an error after `timeout`.
///
/// The child's own `/proc/PID/net` tables are read once `/proc/PID/ns/net` is `ns` (until
/// `ip netns exec` has switched, they would show the caller's namespace).
pub(crate) fn wait_until_bound(
    ns: &str,
    child: &mut std::process::Child,
    port: u16,
    timeout: std::time::Duration,
) -> Result<bool> {
    use std::os::unix::fs::MetadataExt;
    let wanted = std::fs::metadata(format!("/run/netns/{ns}"))
        .with_context(|| format!("namespace {ns}"))?
        .ino();
    let pid = child.id();
    let proc_net = std::path::PathBuf::from(format!("/proc/{pid}/net"));
    let bound = || {
        let in_ns =
            std::fs::metadata(format!("/proc/{pid}/ns/net")).is_ok_and(|m| m.ino() == wanted);
        in_ns && port_bound(&proc_net, port)
    };
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if bound() {
            return Ok(true);
        }
        if child.try_wait().context("waiting for a child")?.is_some() {
            return Ok(false);
        }
        if std::time::Instant::now() >= deadline {
            bail!(
                "nothing was listening on port {port} in namespace {ns} after {:.1} s",
                timeout.as_secs_f64()
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

/// A thread running inside a network namespace ([`spawn_in`]).
pub struct InNamespace<T>(std::thread::JoinHandle<Option<T>>);

impl<T> InNamespace<T> {
    /// Waits for the thread and returns what it returned.
    pub fn join(self) -> Result<T> {
        match self.0.join() {
            Ok(Some(v)) => Ok(v),
            Ok(None) => bail!("the thread never entered its namespace"),
            Err(_) => bail!("a thread in a namespace panicked"),
        }
    }
}

/// Runs `f` on a new thread that has entered the network namespace `ns` (its sockets
/// live there); fails if the namespace cannot be entered.
pub fn spawn_in<T: Send + 'static>(
    ns: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<InNamespace<T>> {
    let file = std::fs::File::open(format!("/run/netns/{ns}"))
        .with_context(|| format!("opening namespace {ns}"))?;
    let (tx, rx) = std::sync::mpsc::channel();
    let handle = std::thread::spawn(move || {
        let entered = rustix::thread::move_into_link_name_space(
            std::os::fd::AsFd::as_fd(&file),
            Some(rustix::thread::LinkNameSpaceType::Network),
        );
        let ok = entered.is_ok();
        let _ = tx.send(entered);
        // Never run `f` outside the namespace it was meant for.
        ok.then(f)
    });
    match rx.recv() {
        Ok(Ok(())) => Ok(InNamespace(handle)),
        Ok(Err(e)) => {
            let _ = handle.join();
            Err(anyhow::Error::from(e).context(format!("entering namespace {ns}")))
        }
        Err(_) => bail!("the thread entering namespace {ns} died"),
    }
}

/// Joins `a` in `ns_a` and `b` in `ns_b` by a veth pair, with addresses (/24) and links up.
fn veth(
    ns_a: &str,
    a: &str,
    addr_a: Ipv4Addr,
    ns_b: &str,
    b: &str,
    addr_b: Ipv4Addr,
) -> Result<()> {
    run(&[
        "ip", "link", "add", a, "netns", ns_a, "type", "veth", "peer", "name", b, "netns", ns_b,
    ])?;
    for (ns, dev, addr) in [(ns_a, a, addr_a), (ns_b, b, addr_b)] {
        let cidr = format!("{addr}/24");
        run(&["ip", "-n", ns, "addr", "add", &cidr, "dev", dev])?;
        run(&["ip", "-n", ns, "link", "set", dev, "up"])?;
        run(&["ip", "-n", ns, "link", "set", "lo", "up"])?;
    }
    Ok(())
}

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
    namespaces: Namespaces,
    sender_if: String,
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

impl VethLink {
    /// Makes the namespaces and the link, or says why it cannot (not root, no `ip`, no
    /// namespace support). `tag` (letters only) names the experiment.
    pub fn create(tag: &str) -> Result<VethLink> {
        let namespaces = Namespaces::create(tag, &["s", "r"])?;
        let pid = std::process::id();
        let (sender_if, receiver_if) = (format!("stv{pid}s"), format!("stv{pid}r"));
        let (sender_addr, receiver_addr) =
            (Ipv4Addr::new(10, 199, 0, 1), Ipv4Addr::new(10, 199, 0, 2));
        let (ns_s, ns_r) = (&namespaces.names[0], &namespaces.names[1]);
        veth(
            ns_s,
            &sender_if,
            sender_addr,
            ns_r,
            &receiver_if,
            receiver_addr,
        )?;
        let rate = format!("{LINK_RATE_BPS}bit");
        let tbf = [
            "tc", "-n", ns_s, "qdisc", "add", "dev", &sender_if, "root", "tbf", "rate", &rate,
            "burst", "3028", "latency", "5ms",
        ];
        let qdisc = match process::find("tc").map(|_| run(&tbf)) {
            Some(Ok(())) => format!(
                "tbf rate {} Gbit/s, bucket 2 frames, on the sender's end",
                LINK_RATE_BPS / 1_000_000_000
            ),
            Some(Err(e)) => format!("none (tbf refused: {e:#})"),
            None => "none (tc is not installed)".to_string(),
        };
        Ok(VethLink {
            namespaces,
            sender_if,
            receiver_if,
            sender_addr,
            receiver_addr,
            qdisc,
        })
    }

    /// The namespace of `end`.
    pub fn namespace(&self, end: End) -> &str {
        &self.namespaces.names[match end {
            End::Sender => 0,
            End::Receiver => 1,
        }]
    }

    /// Replaces the sender's qdisc with a `tbf` of `rate_bps`, a bucket of two full-size
    /// frames and a queue of `limit_bytes`: a bottleneck the kernel's timers enforce.
    pub fn set_tbf(&mut self, rate_bps: u64, limit_bytes: u64) -> Result<()> {
        let ns = self.namespaces.names[0].clone();
        run(&[
            "tc",
            "-n",
            &ns,
            "qdisc",
            "replace",
            "dev",
            &self.sender_if,
            "root",
            "tbf",
            "rate",
            &format!("{rate_bps}bit"),
            "burst",
            "3028",
            "limit",
            &limit_bytes.to_string(),
        ])?;
        self.qdisc = format!(
            "tbf rate {rate_bps} bit/s, bucket 2 frames, limit {limit_bytes} B, on the sender's end"
        );
        Ok(())
    }

    /// Packets the sender's qdisc dropped, from `tc -s`.
    pub fn qdisc_drops(&self) -> Result<u64> {
        let json = device_stats("tc", &self.namespaces.names[0], "qdisc", &self.sender_if)?;
        json.as_array()
            .and_then(|qs| qs.iter().find(|q| q["root"].as_bool() == Some(true)))
            .and_then(|q| q["drops"].as_u64())
            .context("tc did not report the root qdisc's drops")
    }

    /// The receiving end's interface name (what a capture there listens on).
    pub fn receiver_interface(&self) -> &str {
        &self.receiver_if
    }

    /// `program args…` to run inside `end`'s namespace.
    pub fn command(&self, end: End, program: impl AsRef<OsStr>) -> Command {
        command_in(
            &self.namespaces.names[match end {
                End::Sender => 0,
                End::Receiver => 1,
            }],
            program,
        )
    }
}

/// A host of a [`ForwardPath`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Host {
    /// Where the flood comes from.
    Source,
    /// The router under test.
    Router,
    /// Where forwarded packets go.
    Sink,
}

/// Source → router → sink: three namespaces, two veth pairs.
#[derive(Debug)]
pub struct ForwardPath {
    namespaces: Namespaces,
    router_out_if: String,
    /// The router's address on the source's link (where the flood is sent).
    pub router_in: Ipv4Addr,
    /// The next hop the router forwards to: a phantom host on the sink's link.
    pub next_hop: Ipv4Addr,
}

impl ForwardPath {
    /// Makes the namespaces, links, addresses and the phantom next hop, or says why it cannot.
    pub fn create(tag: &str) -> Result<ForwardPath> {
        let namespaces = Namespaces::create(tag, &["src", "rtr", "snk"])?;
        let pid = std::process::id();
        let [src, rtr, snk] = [0, 1, 2].map(|i| namespaces.names[i].clone());
        let router_out_if = format!("stf{pid}b");
        veth(
            &src,
            &format!("stf{pid}s"),
            Ipv4Addr::new(10, 201, 1, 1),
            &rtr,
            &format!("stf{pid}a"),
            Ipv4Addr::new(10, 201, 1, 2),
        )?;
        veth(
            &rtr,
            &router_out_if,
            Ipv4Addr::new(10, 201, 2, 1),
            &snk,
            &format!("stf{pid}k"),
            Ipv4Addr::new(10, 201, 2, 2),
        )?;
        let next_hop = Ipv4Addr::new(10, 201, 2, 99);
        run(&[
            "ip",
            "-n",
            &rtr,
            "neigh",
            "add",
            &next_hop.to_string(),
            "lladdr",
            "02:00:00:00:00:99",
            "dev",
            &router_out_if,
            "nud",
            "permanent",
        ])?;
        Ok(ForwardPath {
            namespaces,
            router_out_if,
            router_in: Ipv4Addr::new(10, 201, 1, 2),
            next_hop,
        })
    }

    /// `program args…` to run on `host`.
    pub fn command(&self, host: Host, program: impl AsRef<OsStr>) -> Command {
        let i = match host {
            Host::Source => 0,
            Host::Router => 1,
            Host::Sink => 2,
        };
        command_in(&self.namespaces.names[i], program)
    }

    /// Packets the router's outgoing interface has sent: the paper's count of forwarded
    /// packets (`netstat`'s `Opkts` on the output interface).
    pub fn router_tx_packets(&self) -> Result<u64> {
        let links = device_stats("ip", &self.namespaces.names[1], "link", &self.router_out_if)?;
        links[0]["stats64"]["tx"]["packets"]
            .as_u64()
            .ok_or_else(|| anyhow::anyhow!("`ip -j -s link` shows no tx packet count"))
    }
}

/// The statistics `program` (`tc` or `ip`) shows of `object` (`qdisc`, `link`) on `device`
/// in namespace `ns`, as JSON (`-s -j`).
fn device_stats(program: &str, ns: &str, object: &str, device: &str) -> Result<serde_json::Value> {
    let args = ["-n", ns, "-s", "-j", object, "show", "dev", device];
    let out = Command::new(program)
        .args(args)
        .output()
        .with_context(|| format!("running {program}"))?;
    serde_json::from_slice(&out.stdout)
        .with_context(|| format!("reading `{program} {}`", args.join(" ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_udp_port_is_held_by_the_process_that_bound_it_not_by_its_neighbours() {
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = socket.local_addr().unwrap().port();
        assert!(holds_udp_port(std::process::id(), port));
        assert!(port_bound("/proc/net".as_ref(), port));
        let mut neighbour = Command::new("sleep").arg("5").spawn().unwrap();
        let held = holds_udp_port(neighbour.id(), port);
        neighbour.kill().unwrap();
        neighbour.wait().unwrap();
        assert!(!held, "another process's socket counted as the child's");
        drop(socket);
        assert!(!holds_udp_port(std::process::id(), port));
    }

    /// What `made` made, as root; elsewhere `None`, after checking that it was refused for
    /// want of root.
    fn made_as_root<T>(made: anyhow::Result<T>) -> Option<T> {
        match made {
            Ok(made) => Some(made),
            Err(e) if !rustix::process::geteuid().is_root() => {
                assert!(format!("{e}").contains("needs root"), "{e}");
                None
            }
            Err(e) => panic!("as root, it should be made: {e:#}"),
        }
    }

    /// Root only; elsewhere `create` must refuse with a reason.
    #[test]
    fn makes_a_link_with_addresses_and_qdisc_and_removes_it() {
        let Some(link) = made_as_root(VethLink::create("t")) else {
            return;
        };
        let ns = link.namespaces.names[1].clone();
        let shown = link
            .command(End::Receiver, "ip")
            .args(["-brief", "addr", "show", "dev", link.receiver_interface()])
            .output()
            .unwrap();
        let shown = String::from_utf8_lossy(&shown.stdout);
        assert!(shown.contains("10.199.0.2/24"), "{shown}");
        assert!(shown.contains("UP"), "{shown}");
        assert!(link.qdisc.starts_with("tbf"), "{}", link.qdisc);
        drop(link);
        let list = Command::new("ip").args(["netns", "list"]).output().unwrap();
        assert!(
            !String::from_utf8_lossy(&list.stdout).contains(&ns),
            "the namespace outlived its link"
        );
        assert!(LIVE.lock().unwrap().iter().all(|n| n != &ns));
    }

    #[test]
    fn a_forward_path_counts_what_the_router_sends_and_is_removed() {
        let Some(path) = made_as_root(ForwardPath::create("tp")) else {
            return;
        };
        let before = path.router_tx_packets().unwrap();
        // The router's namespace sends 3 datagrams to the phantom next hop: they leave on
        // the wire (counted) without ARP, since the neighbour entry is permanent.
        let out = path
            .command(Host::Router, "bash")
            .args(["-c", "for i in 1 2 3; do printf x > /dev/udp/10.201.2.99/9000 2>/dev/null || exit 3; done"])
            .status();
        if out.is_ok_and(|s| s.success()) {
            assert_eq!(path.router_tx_packets().unwrap() - before, 3);
        }
        let names = path.namespaces.names.clone();
        // A second path from the same process refuses instead of clobbering.
        assert!(ForwardPath::create("tp").is_err());
        drop(path);
        let list = Command::new("ip").args(["netns", "list"]).output().unwrap();
        let list = String::from_utf8_lossy(&list.stdout);
        assert!(names.iter().all(|n| !list.contains(n.as_str())), "{list}");
    }
}
