//! Signals as futures: every listener sees a delivery, deliveries before a `recv`
//! coalesce, and signals that cannot be caught are refused.

use std::time::Duration;

use rustix::process::{Signal as Sig, getpid, kill_process};
use softtimer_async::Runtime;
use softtimer_async::signal::{SignalKind, signal};
use softtimer_async::time::timeout;

const BOUND: Duration = Duration::from_secs(10);

/// Sends `sig` to this process. The kernel may run the handler on another thread after
/// `kill` has returned, so a test that needs it done waits for a listener to see it, or
/// [`SETTLE`].
fn send(sig: Sig) {
    kill_process(getpid(), sig).unwrap();
}

/// Long enough for a handler on another thread to have run.
const SETTLE: Duration = Duration::from_millis(50);

#[test]
fn every_listener_on_every_loop_sees_a_signal_and_deliveries_coalesce() {
    let rt = Runtime::builder().threads(2).build().unwrap();
    let (ready_tx, ready) = std::sync::mpsc::channel();
    // A listener on loop 1, another on loop 0.
    let other = rt.handle().spawn_on(1, async move {
        let mut usr1 = signal(SignalKind::user_defined1()).unwrap();
        ready_tx.send(()).unwrap();
        timeout(BOUND, usr1.recv()).await.unwrap()
    });
    rt.block_on(async {
        let mut usr1 = signal(SignalKind::user_defined1()).unwrap();
        ready.recv_timeout(BOUND).unwrap();
        send(Sig::USR1);
        assert_eq!(timeout(BOUND, usr1.recv()).await.unwrap(), Some(()));
        assert_eq!(timeout(BOUND, other).await.unwrap().unwrap(), Some(()));
        // Two deliveries before a recv: one recv completes, the next waits for a third.
        send(Sig::USR1);
        send(Sig::USR1);
        softtimer_async::time::sleep(SETTLE).await;
        assert_eq!(timeout(BOUND, usr1.recv()).await.unwrap(), Some(()));
        let quiet = timeout(Duration::from_millis(20), usr1.recv()).await;
        assert!(quiet.is_err(), "a recv completed without a new signal");
        // A listener made after a delivery waits for the next one; dropping one (its
        // duplicate leaves the epoll set) leaves the others working.
        let mut late = signal(SignalKind::user_defined1()).unwrap();
        drop(signal(SignalKind::user_defined1()).unwrap());
        assert!(
            timeout(Duration::from_millis(5), late.recv())
                .await
                .is_err()
        );
        send(Sig::USR1);
        assert_eq!(timeout(BOUND, late.recv()).await.unwrap(), Some(()));
        assert_eq!(timeout(BOUND, usr1.recv()).await.unwrap(), Some(()));
    });
}

#[test]
fn signals_that_cannot_be_caught_are_refused_and_a_listener_needs_a_runtime() {
    for bad in [
        SignalKind::from_raw(libc_sigkill()),
        SignalKind::from_raw(0),
        SignalKind::from_raw(32), // the C library's own
        SignalKind::from_raw(-3),
        SignalKind::from_raw(1000),
    ] {
        let rt = Runtime::new().unwrap();
        let err = rt.block_on(async { signal(bad).unwrap_err() });
        assert_eq!(
            err.kind(),
            std::io::ErrorKind::InvalidInput,
            "{bad:?}: {err}"
        );
    }
    // Outside a runtime thread: an error, not a panic.
    assert!(signal(SignalKind::user_defined2()).is_err());
}

fn libc_sigkill() -> i32 {
    Sig::KILL.as_raw()
}
