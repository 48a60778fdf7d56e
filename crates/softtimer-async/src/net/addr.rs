//! Turning what a user writes for an address (`"example.com:443"`, `("::1", 8080)`, a
//! `SocketAddr`) into socket addresses without blocking the loop: a literal address is parsed
//! at once, a host name is resolved by `getaddrinfo` on the blocking pool.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

use crate::blocking::spawn_blocking;

/// What [`lookup_host`], [`TcpStream::connect`](crate::TcpStream::connect),
/// [`TcpListener::bind`](crate::TcpListener::bind), [`UdpSocket::bind`](crate::UdpSocket::bind)
/// and [`UdpSocket::connect`](crate::UdpSocket::connect) take: a socket address, an IP
/// address and port, a slice of socket addresses (tried in order), or a `"host:port"` string
/// (or a host and a port) whose host may be a name.
///
/// A name is resolved by the system's resolver (`getaddrinfo`, which may block for a DNS
/// query) on the runtime's blocking pool, so the loop runs its timers meanwhile; a literal
/// address never leaves the loop. The trait is sealed and implemented for the types tokio's
/// is: `SocketAddr`, `SocketAddrV4` and `SocketAddrV6`, `(IpAddr, u16)` and its v4 and v6
/// forms, `&[SocketAddr]`, `str` and `String`, `(&str, u16)` and `(String, u16)`, and a
/// reference to any of them.
///
/// A host with a colon in it (an IPv6 address) is written in brackets, `"[fe80::1%eth0]:443"`,
/// or as the tuple's first element, `("fe80::1%eth0", 443)`; `"::1"` alone is refused.
///
/// ```
/// use std::net::SocketAddr;
/// use softtimer_async::{Runtime, UdpSocket};
///
/// let rt = Runtime::new().unwrap();
/// rt.block_on(async {
///     // The first address that binds: 127.0.0.1's port 0 always does.
///     let addrs: [SocketAddr; 2] = ["127.0.0.1:0".parse().unwrap(), "[::1]:0".parse().unwrap()];
///     let socket = UdpSocket::bind(&addrs[..]).await.unwrap();
///     assert!(socket.local_addr().unwrap().is_ipv4());
/// });
/// ```
pub trait ToSocketAddrs: sealed::Sealed {}

mod sealed {
    use super::*;

    /// How an address turns into socket addresses.
    pub enum Resolve {
        /// Already addresses.
        Ready(Vec<SocketAddr>),
        /// A host and a port for the resolver.
        Lookup(String, u16),
    }

    pub trait Sealed {
        fn resolve(&self) -> io::Result<Resolve>;

        /// The address, when it is exactly one socket address, typed or written out (no
        /// allocation, no lookup).
        fn one(&self) -> Option<SocketAddr> {
            None
        }
    }
}
use sealed::{Resolve, Sealed};

macro_rules! ready {
    ($($t:ty),*) => {$(
        impl ToSocketAddrs for $t {}
        impl Sealed for $t {
            fn resolve(&self) -> io::Result<Resolve> {
                Ok(Resolve::Ready(vec![SocketAddr::from(*self)]))
            }

            fn one(&self) -> Option<SocketAddr> {
                Some(SocketAddr::from(*self))
            }
        }
    )*};
}
ready!(
    SocketAddr,
    SocketAddrV4,
    SocketAddrV6,
    (IpAddr, u16),
    (Ipv4Addr, u16),
    (Ipv6Addr, u16)
);

impl ToSocketAddrs for [SocketAddr] {}
impl Sealed for [SocketAddr] {
    fn resolve(&self) -> io::Result<Resolve> {
        Ok(Resolve::Ready(self.to_vec()))
    }
}

impl<T: ToSocketAddrs + ?Sized> ToSocketAddrs for &T {}
impl<T: ToSocketAddrs + ?Sized> Sealed for &T {
    fn resolve(&self) -> io::Result<Resolve> {
        (**self).resolve()
    }

    fn one(&self) -> Option<SocketAddr> {
        (**self).one()
    }
}

impl ToSocketAddrs for str {}
impl Sealed for str {
    fn resolve(&self) -> io::Result<Resolve> {
        if let Ok(addr) = self.parse::<SocketAddr>() {
            return Ok(Resolve::Ready(vec![addr]));
        }
        // "host:port", the port after the last colon; a host with colons of its own (IPv6,
        // perhaps with a zone the parse above does not take) in brackets, and only such a
        // host, as std has it.
        let (host, port) = self
            .rsplit_once(':')
            .ok_or_else(|| invalid(format!("`{self}` is not `host:port`")))?;
        let port = port
            .parse::<u16>()
            .map_err(|_| invalid(format!("`{port}` in `{self}` is not a port number")))?;
        let host = match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            Some(inner) if inner.contains(':') => inner,
            Some(_) => {
                return Err(invalid(format!(
                    "`{self}`: only an IPv6 host is written in brackets"
                )));
            }
            None if host.contains(':') => {
                return Err(invalid(format!(
                    "`{self}`: an IPv6 host is written in brackets, `[host]:port`"
                )));
            }
            None => host,
        };
        (host, port).resolve()
    }

    fn one(&self) -> Option<SocketAddr> {
        self.parse().ok()
    }
}

impl ToSocketAddrs for String {}
impl Sealed for String {
    fn resolve(&self) -> io::Result<Resolve> {
        self.as_str().resolve()
    }

    fn one(&self) -> Option<SocketAddr> {
        self.as_str().one()
    }
}

impl ToSocketAddrs for (&str, u16) {}
impl Sealed for (&str, u16) {
    fn resolve(&self) -> io::Result<Resolve> {
        let (host, port) = *self;
        if host.is_empty() {
            return Err(invalid("an empty host name".to_string()));
        }
        if let Ok(ip) = host.parse::<IpAddr>() {
            return Ok(Resolve::Ready(vec![SocketAddr::new(ip, port)]));
        }
        Ok(Resolve::Lookup(host.to_string(), port))
    }

    fn one(&self) -> Option<SocketAddr> {
        let ip = self.0.parse::<IpAddr>().ok()?;
        Some(SocketAddr::new(ip, self.1))
    }
}

impl ToSocketAddrs for (String, u16) {}
impl Sealed for (String, u16) {
    fn resolve(&self) -> io::Result<Resolve> {
        (self.0.as_str(), self.1).resolve()
    }

    fn one(&self) -> Option<SocketAddr> {
        (self.0.as_str(), self.1).one()
    }
}

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, message)
}

/// The socket addresses of `addr`, in the resolver's order: a literal address (or a slice
/// of them, perhaps empty) at once, a host name through the system's resolver on the blocking pool (the loop goes on running
/// meanwhile; a lookup whose future is dropped before it has started is cancelled). A
/// `Vec`, where tokio's gives an iterator (`.into_iter()` makes one).
///
/// ```
/// use softtimer_async::{Runtime, net::lookup_host};
///
/// let rt = Runtime::new().unwrap();
/// rt.block_on(async {
///     let literal = lookup_host("127.0.0.1:8080").await.unwrap();
///     assert_eq!(literal, ["127.0.0.1:8080".parse().unwrap()]);
///     // A name goes to the resolver; "localhost" is in every /etc/hosts.
///     let local = lookup_host(("localhost", 80)).await.unwrap();
///     assert!(local.iter().all(|a| a.ip().is_loopback() && a.port() == 80));
///     assert!(lookup_host("no port here").await.is_err());
/// });
/// ```
///
/// # Errors
///
/// `InvalidInput` for a string that is not `host:port`, whose port is not a number or whose
/// IPv6 host is not in brackets, and for a name that resolves to no address; the resolver's
/// error for a name it cannot resolve.
///
/// # Panics
///
/// For a host name, outside a runtime thread (the lookup needs the runtime's blocking pool).
pub async fn lookup_host(addr: impl ToSocketAddrs) -> io::Result<Vec<SocketAddr>> {
    match addr.resolve()? {
        Resolve::Ready(addrs) => Ok(addrs),
        Resolve::Lookup(host, port) => {
            let mut lookup = AbortOnDrop(spawn_blocking(move || {
                std::net::ToSocketAddrs::to_socket_addrs(&(host.as_str(), port))
                    .map(Iterator::collect::<Vec<_>>)
            }));
            let found = (&mut lookup.0).await.map_err(io::Error::other)??;
            if found.is_empty() {
                return Err(invalid("the name resolved to no address".to_string()));
            }
            Ok(found)
        }
    }
}

/// The first address of `addr`: at once, without allocating, for one socket address, typed
/// or a literal string (a hot path's case, on any thread); otherwise as [`first_that_opens`]
/// finds it (the same errors: a name outside a runtime thread is refused).
pub(crate) async fn first_address(addr: impl ToSocketAddrs) -> io::Result<SocketAddr> {
    match addr.one() {
        Some(addr) => Ok(addr),
        None => first_that_opens(addr, |addr| std::future::ready(Ok(addr))).await,
    }
}

/// `open` on each address of `addr` in turn, resolved as [`lookup_host`] does: what the
/// first that opens gives, or the last error (how `bind` and `connect` take a name);
/// `InvalidInput` for no address at all (an empty slice). Outside a runtime thread, the
/// error every I/O object gives there, for a name as for an address (a name's lookup would
/// panic).
///
/// `open` is a function returning a future, not an async closure: an async closure that
/// borrows (a socket, to connect it) makes a future that is `Send` for one lifetime only,
/// and a caller's task awaiting it could not be spawned.
pub(crate) async fn first_that_opens<T, F>(
    addr: impl ToSocketAddrs,
    mut open: impl FnMut(SocketAddr) -> F,
) -> io::Result<T>
where
    F: Future<Output = io::Result<T>>,
{
    if crate::executor::context_shared().is_none() {
        return Err(crate::reactor::no_runtime());
    }
    let mut last = None;
    for addr in lookup_host(addr).await? {
        match open(addr).await {
            Ok(opened) => return Ok(opened),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| invalid("no address to try (an empty list)".to_string())))
}

/// A task's handle that cancels it when dropped (a lookup nobody waits for any more).
struct AbortOnDrop<T>(crate::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ready(addr: impl ToSocketAddrs) -> Vec<SocketAddr> {
        match addr.resolve().unwrap() {
            Resolve::Ready(addrs) => addrs,
            Resolve::Lookup(host, port) => panic!("{host}:{port} went to the resolver"),
        }
    }

    #[test]
    fn literal_addresses_never_reach_the_resolver() {
        let v4: SocketAddr = "10.0.0.1:53".parse().unwrap();
        let v6: SocketAddr = "[::1]:443".parse().unwrap();
        assert_eq!(ready("10.0.0.1:53"), [v4]);
        assert_eq!(ready("[::1]:443"), [v6]);
        assert_eq!(ready(("::1", 443)), [v6]);
        assert_eq!(ready((String::from("10.0.0.1"), 53)), [v4]);
        assert_eq!(ready((Ipv4Addr::new(10, 0, 0, 1), 53)), [v4]);
    }

    #[test]
    fn names_go_to_the_resolver_and_bad_strings_are_refused() {
        assert!(matches!(
            "example.com:443".resolve().unwrap(),
            Resolve::Lookup(h, 443) if h == "example.com"
        ));
        assert!(matches!(
            "[fe80::1%eth0]:80".resolve().unwrap(),
            Resolve::Lookup(h, 80) if h == "fe80::1%eth0"
        ));
        for bad in [
            "example.com",
            "example.com:http",
            "example.com:70000",
            ":",
            "::1",
            "fe80::1:80",
            "[::1]",
            "host:80:",
            "[example.com]:80",
        ] {
            let err = bad
                .resolve()
                .err()
                .unwrap_or_else(|| panic!("{bad} accepted"));
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{bad}: {err}");
        }
    }
}
