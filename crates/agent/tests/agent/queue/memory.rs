//! The conformance suite on [`MemoryQueue`].

use std::sync::Arc;

use trellis_agent::server::queue::{MemoryQueue, RunQueue};

async fn queue() -> Option<(Arc<dyn RunQueue>, ())> {
    Some((Arc::new(MemoryQueue::new()), ()))
}

super::conformance::suite!(queue);
super::limits::suite!(queue);
