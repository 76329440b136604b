//! Where one event stream — a (worker, dp_rank, tier) — stands, and what its next event means.

/// The last event applied from one stream.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Cursor {
    /// Nothing seen yet: the stream's first event starts a full restore.
    #[default]
    Initial,
    /// Every event up to and including this id is applied.
    Live(u64),
    /// The stream's state was dropped (its worker restarted, or its index lane lost it): the
    /// next event starts a full restore.
    InvalidatedByBarrier,
}

/// What to do with an event, by its id, given the cursor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The next id: apply it.
    Apply,
    /// Already applied (a duplicate or a late copy): drop it.
    Stale,
    /// Ids are missing before it: keep it and fetch the missing ones from `from`.
    Gap {
        /// The first missing id.
        from: u64,
    },
    /// The stream must be rebuilt from a full dump (first event, invalidated cursor, or the
    /// worker restarted); keep the event for after the dump.
    Restore,
}

impl Cursor {
    /// The verdict on an event numbered `id`.
    ///
    /// A worker that restarts numbers its events from the start again: an id of 0 or 1 after
    /// later ids is taken as a restart (a late duplicate of the stream's first events then costs
    /// a needless restore, never a wrong index).
    pub fn classify(self, id: u64) -> Verdict {
        match self {
            Cursor::Initial | Cursor::InvalidatedByBarrier => Verdict::Restore,
            Cursor::Live(last) if id <= 1 && last > id => Verdict::Restore,
            Cursor::Live(last) if id <= last => Verdict::Stale,
            Cursor::Live(last) if id == last + 1 => Verdict::Apply,
            Cursor::Live(last) => Verdict::Gap { from: last + 1 },
        }
    }

    /// The last applied id, if the stream is live.
    pub fn last_applied(self) -> Option<u64> {
        match self {
            Cursor::Live(last) => Some(last),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_by_id() {
        assert_eq!(Cursor::Initial.classify(7), Verdict::Restore);
        assert_eq!(Cursor::InvalidatedByBarrier.classify(7), Verdict::Restore);
        assert_eq!(Cursor::Live(10).classify(11), Verdict::Apply);
        assert_eq!(Cursor::Live(10).classify(10), Verdict::Stale);
        assert_eq!(Cursor::Live(10).classify(4), Verdict::Stale);
        assert_eq!(Cursor::Live(10).classify(15), Verdict::Gap { from: 11 });
        // A stream numbered again from the start: its worker restarted.
        assert_eq!(Cursor::Live(10).classify(0), Verdict::Restore);
        assert_eq!(Cursor::Live(10).classify(1), Verdict::Restore);
        assert_eq!(Cursor::Live(0).classify(1), Verdict::Apply);
        assert_eq!(Cursor::Live(1).classify(1), Verdict::Stale);
    }
}
