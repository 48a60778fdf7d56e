//! A runtime kept in a thread-local is dropped as its thread exits, after the runtime's own
//! thread-locals: its shutdown must not touch them (it aborted the process, "thread local
//! panicked on drop"). Alone in its binary: a regression aborts the process.

use std::cell::RefCell;
use std::time::Duration;

use softtimer_async::Runtime;

thread_local! {
    static RUNTIME: Runtime = Runtime::new().unwrap();
    static TASKS: RefCell<Vec<softtimer_async::JoinHandle<()>>> = const { RefCell::new(Vec::new()) };
}

#[test]
fn a_runtime_in_a_thread_local_shuts_down_as_its_thread_exits() {
    let (dropped_tx, dropped_rx) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        RUNTIME.with(|rt| {
            rt.block_on(async {
                softtimer_async::time::sleep(Duration::from_millis(1)).await;
            });
            // A task left pending, holding something whose drop says so: the shutdown at
            // the thread's exit cancels it.
            let guard = DropSignal(dropped_tx);
            let pending = rt.spawn_local(async move {
                let _guard = guard;
                softtimer_async::time::sleep(Duration::from_secs(3600)).await;
            });
            rt.block_on(softtimer_async::yield_now());
            TASKS.with(|t| t.borrow_mut().push(pending));
        });
    })
    .join()
    .expect("the thread exits cleanly");
    dropped_rx
        .recv_timeout(Duration::from_secs(5))
        .expect("the pending task's future is dropped at the thread's exit");
}

struct DropSignal(std::sync::mpsc::Sender<()>);

impl Drop for DropSignal {
    fn drop(&mut self) {
        let _ = self.0.send(());
    }
}
