//! Which tests of a binary may run side by side. Every test takes this lock first:
//! [`shared`] for almost all of them, [`exclusive`] for the few that must not share the
//! process with tests of other files — they measure the process (its memory, its
//! descriptors), change process-wide limits, flood a server and count what it did, or
//! assert how fast something happened. Each of those was once alone in a binary of its
//! own; the lock keeps them so now that a binary holds a whole area.
//!
//! A blocking lock, held across `.await` without harm: each test is one future driven
//! by its own runtime on its own thread, and a waiting test blocks only that thread.
//! A waiting exclusive test goes before shared tests that come after it, so it is
//! never starved. A failed test releases the lock as it unwinds; the others still run.

use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

struct State {
    /// Shared holders running now.
    shared: usize,
    /// The group holding the lock exclusively, and how many of its tests run.
    exclusive: Option<(&'static str, usize)>,
    /// Exclusive tests waiting: no new shared holder starts before them.
    waiting: usize,
}

static STATE: Mutex<State> = Mutex::new(State {
    shared: 0,
    exclusive: None,
    waiting: 0,
});
static CHANGED: Condvar = Condvar::new();

fn state() -> MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(PoisonError::into_inner)
}

fn wait(guard: MutexGuard<'static, State>) -> MutexGuard<'static, State> {
    CHANGED.wait(guard).unwrap_or_else(PoisonError::into_inner)
}

/// Held by a test that runs beside any other shared test.
#[must_use = "the lock is released when the guard is dropped"]
pub struct Shared(());

/// Held by a test that runs with no test outside its group.
#[must_use = "the lock is released when the guard is dropped"]
pub struct Exclusive(());

/// Waits until no exclusive test runs or waits, then runs beside other shared tests.
pub fn shared() -> Shared {
    let mut s = state();
    while s.exclusive.is_some() || s.waiting > 0 {
        s = wait(s);
    }
    s.shared += 1;
    Shared(())
}

/// Waits until no shared test and no other group runs. Tests of the same `group` run
/// together, as they did in the binary of their former file (`"controller_backoff"`);
/// a test that must be alone even among its file's tests gets a group of its own.
pub fn exclusive(group: &'static str) -> Exclusive {
    let mut s = state();
    s.waiting += 1;
    while s.shared > 0 || s.exclusive.is_some_and(|(holder, _)| holder != group) {
        s = wait(s);
    }
    s.waiting -= 1;
    let running = s.exclusive.map_or(0, |(_, n)| n);
    s.exclusive = Some((group, running + 1));
    Exclusive(())
}

impl Drop for Shared {
    fn drop(&mut self) {
        let mut s = state();
        s.shared -= 1;
        CHANGED.notify_all();
    }
}

impl Drop for Exclusive {
    fn drop(&mut self) {
        let mut s = state();
        s.exclusive = match s.exclusive {
            Some((group, n)) if n > 1 => Some((group, n - 1)),
            _ => None,
        };
        CHANGED.notify_all();
    }
}

/// Every test of this crate takes the lock as its first statement (comments aside):
/// one that does not would run beside the exclusive ones.
#[test]
fn every_test_of_this_crate_takes_the_lock() {
    let _shared = shared();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join(env!("CARGO_CRATE_NAME"));
    let mut missing = Vec::new();
    let mut tests = 0;
    for entry in std::fs::read_dir(&dir).expect("the crate's directory") {
        let path = entry.expect("a directory entry").path();
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("a test file");
        let lines: Vec<&str> = text.lines().map(str::trim).collect();
        for (at, line) in lines.iter().enumerate() {
            if !(*line == "#[test]" || line.starts_with("#[tokio::test")) {
                continue;
            }
            tests += 1;
            let body = lines[at..]
                .iter()
                .position(|l| l.ends_with('{'))
                .map_or(lines.len(), |p| at + p + 1);
            let first = lines[body.min(lines.len())..]
                .iter()
                .find(|l| !l.starts_with("//"));
            let locked = first.is_some_and(|l| {
                l.starts_with("let _shared = crate::support::shared();")
                    || l.starts_with("let _alone = crate::support::exclusive(")
            });
            if !locked {
                missing.push(format!("{}:{}", path.display(), at + 1));
            }
        }
    }
    assert!(tests > 0, "no tests found in {}", dir.display());
    assert!(
        missing.is_empty(),
        "tests that do not start with `let _shared = crate::support::shared();` or \
         `let _alone = crate::support::exclusive(GROUP);`: {missing:?}"
    );
}
