//! Counting of open connections or sessions, in total and per client IP, shared by
//! the HTTP and TFTP servers.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

/// Which cap refused a new connection or session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Over {
    Total,
    PerClient,
}

#[derive(Debug, Default)]
struct Counts {
    total: usize,
    per_client: HashMap<IpAddr, usize>,
}

/// Caps and the current counts. Clones share the counts.
#[derive(Debug, Clone)]
pub struct Slots {
    max_total: usize,
    max_per_client: usize,
    counts: Arc<Mutex<Counts>>,
}

impl Slots {
    pub fn new(max_total: usize, max_per_client: usize) -> Self {
        Self {
            max_total,
            max_per_client,
            counts: Arc::default(),
        }
    }

    /// A slot for `client`, or which cap is reached.
    pub fn take(&self, client: IpAddr) -> Result<Slot, Over> {
        let client = client.to_canonical();
        let mut c = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        if c.total >= self.max_total {
            return Err(Over::Total);
        }
        let mine = c.per_client.entry(client).or_default();
        if *mine >= self.max_per_client {
            return Err(Over::PerClient);
        }
        *mine += 1;
        c.total += 1;
        Ok(Slot {
            counts: self.counts.clone(),
            client,
        })
    }

    /// Slots in use.
    pub fn in_use(&self) -> usize {
        self.counts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .total
    }
}

/// One admitted connection or session; gives its slot back when dropped.
#[derive(Debug)]
pub struct Slot {
    counts: Arc<Mutex<Counts>>,
    client: IpAddr,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        counts.total = counts.total.saturating_sub(1);
        if let Some(n) = counts.per_client.get_mut(&self.client) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                counts.per_client.remove(&self.client);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_count_per_client_and_in_total_and_free_on_drop() {
        let slots = Slots::new(3, 2);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let a1 = slots.take(a).unwrap();
        let _a2 = slots.take(a).unwrap();
        assert_eq!(slots.take(a).err(), Some(Over::PerClient));
        // The IPv4-mapped spelling is the same client.
        assert_eq!(
            slots.take("::ffff:10.0.0.1".parse().unwrap()).err(),
            Some(Over::PerClient)
        );
        let _b1 = slots.take(b).unwrap();
        assert_eq!(slots.take(b).err(), Some(Over::Total));
        assert_eq!(slots.in_use(), 3);
        drop(a1);
        assert!(slots.take(b).is_ok());
    }
}
