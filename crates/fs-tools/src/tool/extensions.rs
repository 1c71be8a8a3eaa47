//! [`Extensions`]: values a caller hands to a run, keyed by type.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

/// Values a caller hands to a run that are not part of the thread's state and never checkpointed:
/// the user's identity and roles, handles to services, per-run settings. Keyed by type; cheap to
/// clone (copy-on-write).
#[derive(Clone, Default)]
pub struct Extensions {
    map: Arc<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>,
}

impl fmt::Debug for Extensions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Extensions")
            .field("len", &self.map.len())
            .finish()
    }
}

impl Extensions {
    /// Empty.
    pub fn new() -> Self {
        Self::default()
    }

    /// Store `value`, replacing any value of the same type.
    pub fn insert<T: Send + Sync + 'static>(&mut self, value: T) {
        Arc::make_mut(&mut self.map).insert(TypeId::of::<T>(), Arc::new(value));
    }

    /// The value of type `T`, if one was stored.
    pub fn get<T: Send + Sync + 'static>(&self) -> Option<&T> {
        self.map
            .get(&TypeId::of::<T>())
            .and_then(|v| v.downcast_ref::<T>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extensions_are_typed() {
        #[derive(Debug, PartialEq)]
        struct User(&'static str);
        let mut ext = Extensions::new();
        ext.insert(User("ada"));
        ext.insert(7_u8);
        assert_eq!(ext.get::<User>(), Some(&User("ada")));
        assert_eq!(ext.get::<u8>(), Some(&7));
        assert_eq!(ext.get::<u16>(), None);
        let copy = ext.clone();
        ext.insert(8_u8);
        assert_eq!(copy.get::<u8>(), Some(&7), "clones are copy-on-write");
    }
}
