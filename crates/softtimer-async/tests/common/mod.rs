//! What the Unix-domain socket tests share.

use std::path::PathBuf;

/// A fresh directory for a test's socket files (`name` and the process make it unique),
/// removed when dropped.
pub struct Dir(pub PathBuf);

impl Dir {
    pub fn new(name: &str) -> Dir {
        let dir = std::env::temp_dir().join(format!("st-uds-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Dir(dir)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
