//! The embedding example run as a test: an application's own loop serves QUIC (a
//! `QuicSocket` among its descriptors) and a plain UDP echo at once, and both clients are
//! answered in full.

#[path = "../examples/quic_and_echo.rs"]
#[allow(dead_code)]
mod quic_and_echo;

use std::time::Duration;

#[test]
fn one_application_loop_serves_quic_requests_and_a_udp_echo() {
    let served = quic_and_echo::serve(Duration::from_secs(20)).unwrap();
    assert_eq!(served.client_requests, 20, "{served:?}");
    assert_eq!(served.quic_requests, 20, "{served:?}");
    assert_eq!(served.echoes_back, 20, "{served:?}");
    assert_eq!(served.echoed, 20, "{served:?}");
}
