//! A task holding one of a few turns lends it out while it waits on a slow peer.
//!
//! Host reconciles take one of `BMO_CONCURRENCY` turns (`controller::runtime::turns`).
//! Under load Ironic answers a state change (a `PUT` that takes the node's lock) in
//! 0.6–0.8 s, and at N = 1000 six of a host's eight turns were mostly that wait: the
//! turns, not Ironic, set the pace. A reconcile now lends its turn to the next one in
//! line while such a request is in flight ([`lent_while`]) and takes a turn back,
//! ahead of every waiting reconcile, when the answer is in. The turns' owner caps how
//! many are lent at once, so the requests in flight to Ironic stay bounded.
//!
//! This module knows no controller and no peer: the turns implement [`TurnHolder`],
//! the Ironic client calls [`lent_while`], and a task outside a reconcile (or in a
//! turn that cannot be lent) just waits.

use std::future::Future;
use std::sync::Arc;

use futures::future::BoxFuture;

/// The turn the current task holds, as far as lending goes.
pub trait TurnHolder: Send + Sync {
    /// Gives the turn to whoever is next; whether it was lent (not when the turns'
    /// cap on lent turns is reached, or the turn is not held).
    fn lend(&self) -> bool;
    /// A turn again, ahead of everyone waiting for a first one.
    fn reclaim(&self) -> BoxFuture<'static, ()>;
}

tokio::task_local! {
    static HOLDER: Arc<dyn TurnHolder>;
}

/// Runs `work` as the holder of the turn `holder`, so that its slow requests lend it.
pub async fn holding<F: Future>(holder: Arc<dyn TurnHolder>, work: F) -> F::Output {
    HOLDER.scope(holder, work).await
}

/// Awaits `request` with the current task's turn lent out, then takes a turn back.
pub async fn lent_while<F: Future>(request: F) -> F::Output {
    let Ok(holder) = HOLDER.try_with(Arc::clone) else {
        return request.await;
    };
    if !holder.lend() {
        return request.await;
    }
    let answer = request.await;
    holder.reclaim().await;
    answer
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[derive(Default)]
    struct Recorder {
        calls: Mutex<Vec<&'static str>>,
        refuse: bool,
    }

    impl TurnHolder for Recorder {
        fn lend(&self) -> bool {
            self.calls.lock().unwrap().push("lend");
            !self.refuse
        }
        fn reclaim(&self) -> BoxFuture<'static, ()> {
            self.calls.lock().unwrap().push("reclaim");
            Box::pin(async {})
        }
    }

    async fn request(recorder: &Recorder) -> u8 {
        recorder.calls.lock().unwrap().push("request");
        7
    }

    #[tokio::test]
    async fn a_turn_is_lent_for_the_request_and_taken_back_after_it() {
        let recorder = Arc::new(Recorder::default());
        let holder: Arc<dyn TurnHolder> = recorder.clone();
        let answer = holding(holder, lent_while(request(&recorder))).await;
        assert_eq!(answer, 7);
        assert_eq!(
            *recorder.calls.lock().unwrap(),
            ["lend", "request", "reclaim"]
        );
    }

    #[tokio::test]
    async fn a_turn_not_lent_is_not_reclaimed_and_no_holder_is_no_lending() {
        let recorder = Arc::new(Recorder {
            refuse: true,
            ..Recorder::default()
        });
        let holder: Arc<dyn TurnHolder> = recorder.clone();
        assert_eq!(holding(holder, lent_while(request(&recorder))).await, 7);
        assert_eq!(*recorder.calls.lock().unwrap(), ["lend", "request"]);

        let outside = Recorder::default();
        assert_eq!(lent_while(request(&outside)).await, 7);
        assert_eq!(*outside.calls.lock().unwrap(), ["request"]);
    }
}
