//! `ctrl_c`, in a test binary of its own: once it has run, Ctrl-C at the terminal no longer
//! stops the binary's other tests.

use std::time::Duration;

use rustix::process::{Signal as Sig, getpid, kill_process};
use softtimer_async::Runtime;
use softtimer_async::time::timeout;

const BOUND: Duration = Duration::from_secs(10);

fn send(sig: Sig) {
    kill_process(getpid(), sig).unwrap();
}

#[test]
fn ctrl_c_completes_at_the_next_sigint_instead_of_ending_the_process() {
    use std::future::Future;
    use std::task::Poll;
    let rt = Runtime::new().unwrap();
    rt.block_on(async {
        let mut ctrl_c = std::pin::pin!(softtimer_async::signal::ctrl_c());
        // Its first poll installs the handler and finds nothing yet.
        let first = std::future::poll_fn(|cx| Poll::Ready(ctrl_c.as_mut().poll(cx))).await;
        assert!(first.is_pending());
        send(Sig::INT);
        timeout(BOUND, ctrl_c).await.unwrap().unwrap();
    });
}
