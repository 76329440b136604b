//! [`RequestId`]: the name of one request in flight.

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};

use crate::sync::{Arc, shared_str};

/// The id of one request in flight, as the gateway names it (a UUID, an `x-request-id` header,
/// an OpenAI-style `chatcmpl-…` id).
///
/// Ids are strings because that is what gateways already carry and what peer routers must agree
/// on when they replicate load (see [`super::SequenceEvent`]); an embedding router never has to
/// keep a second table from its own ids to ours. The string is stored once and shared: cloning a
/// `RequestId` (into an index, a record, an event) bumps a reference count and copies nothing.
///
/// Equality, ordering and hashing follow the string's content, so a `HashMap<RequestId, _>`
/// can be queried with a `&str`.
///
/// ```
/// use kvroute::sequences::RequestId;
///
/// let id = RequestId::from("chatcmpl-42");
/// assert_eq!(id.as_str(), "chatcmpl-42");
/// assert_eq!(id, RequestId::from(String::from("chatcmpl-42")));
/// assert_eq!(id.to_string(), "chatcmpl-42");
/// ```
#[derive(Clone)]
pub struct RequestId(Arc<str>);

// By content, consistently with `Borrow<str>` (written out: loom's `Arc` derives none of them).
impl PartialEq for RequestId {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for RequestId {}

impl Hash for RequestId {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl PartialOrd for RequestId {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for RequestId {
    fn cmp(&self, other: &Self) -> Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl RequestId {
    /// The id as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether `self` and `other` are clones of the same id value (not merely equal strings).
    ///
    /// Used to tell a live entry from a stale one left behind by an id that was dropped and
    /// then reused.
    pub(crate) fn same_allocation(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl From<&str> for RequestId {
    fn from(value: &str) -> Self {
        Self(shared_str(value))
    }
}

impl From<String> for RequestId {
    fn from(value: String) -> Self {
        Self(shared_str(&value))
    }
}

impl From<&String> for RequestId {
    fn from(value: &String) -> Self {
        Self(shared_str(value))
    }
}

impl Borrow<str> for RequestId {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for RequestId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(feature = "serde")]
impl serde::Serialize for RequestId {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for RequestId {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(Self::from(String::deserialize(deserializer)?))
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::collections::HashMap;

    use super::*;

    #[test]
    fn equal_strings_are_equal_ids_but_distinct_allocations() {
        let a = RequestId::from("r1");
        let b = RequestId::from("r1");
        assert_eq!(a, b);
        assert!(!a.same_allocation(&b));
        assert!(a.same_allocation(&a.clone()));
    }

    #[test]
    fn maps_keyed_by_id_can_be_queried_by_str() {
        let mut map = HashMap::new();
        map.insert(RequestId::from("r1"), 7);
        assert_eq!(map.get("r1"), Some(&7));
        assert_eq!(map.get("r2"), None);
    }

    #[test]
    fn debug_and_display_show_the_string() {
        let id = RequestId::from(String::from("a\"b"));
        assert_eq!(id.to_string(), "a\"b");
        assert_eq!(format!("{id:?}"), "\"a\\\"b\"");
        assert!(RequestId::from("a") < RequestId::from("b"));
    }
}
