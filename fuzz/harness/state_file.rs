//! Fuzz harness: the state file's parser (`runtime::state_file::decode`).
//!
//! Input: the contents of a state file, read at start-up (any problem there
//! means a clean start). Besides "no panic": an error is `Corrupt` or
//! `Version` (of another version), both logged as `corrupt`; a file that
//! decodes encodes again (`encode`, what the writer saves) and decodes back
//! to the same records, its times cut to the millisecond the format keeps,
//! and a second round trip gives the same bytes; a file written ahead of
//! the clock, rebased, moves no window's end later nor before now.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use pin_proxy::inspect::state_file::{LoadError, SavedState, VERSION, decode, encode};

/// The clock at start-up: 2026-12-05T00:00:00Z.
const NOW: Duration = Duration::from_secs(1_796_428_800);

/// Decode `data` as a state file and check what comes out.
pub fn run(data: &[u8]) {
    let state = match decode(data) {
        Ok(state) => state,
        Err(err) => {
            match &err {
                LoadError::Version(v) => assert_ne!(*v, u64::from(VERSION), "{err}"),
                LoadError::Corrupt(_) => {}
                other => panic!("decode gave {other:?}"),
            }
            assert_eq!(err.as_str(), "corrupt");
            return;
        }
    };
    let now = UNIX_EPOCH + NOW;
    let written_at = state.written_at.unwrap_or(now);
    let bytes = encode(&state, written_at).expect("a decoded state encodes");
    let back = decode(&bytes).expect("an encoded state decodes");
    assert_eq!(
        back,
        to_millis(&state, written_at),
        "not the same records back"
    );
    let again = encode(&back, written_at).expect("a decoded state encodes");
    assert_eq!(again, bytes, "a second round trip changed the file");
    check_rebase(state, now);
}

/// `state` as the format keeps it: every time cut to the millisecond, the
/// file's time `written_at`.
fn to_millis(state: &SavedState, written_at: SystemTime) -> SavedState {
    let mut out = state.clone();
    for b in out.pools.iter_mut().flat_map(|(_, b)| b.iter_mut()) {
        if let Some(q) = b.quarantine.as_mut() {
            q.until = millis(q.until);
        }
    }
    out.written_at = Some(millis(written_at));
    out
}

fn millis(t: SystemTime) -> SystemTime {
    let since = t.duration_since(UNIX_EPOCH).expect("a time after 1970");
    UNIX_EPOCH + Duration::from_millis(u64::try_from(since.as_millis()).expect("millis fit"))
}

/// A file from ahead of `now` counts its windows from `now`: each ends at
/// or after `now`, never later than it said, and the file still encodes.
fn check_rebase(mut state: SavedState, now: SystemTime) {
    let Some(ahead) = state.ahead_of(now) else {
        return;
    };
    assert!(!ahead.is_zero());
    let before = state.clone();
    let windows = state.rebase(now);
    assert_eq!(state.written_at, Some(now));
    let pairs = before.pools.iter().zip(&state.pools);
    let records = pairs.flat_map(|((_, was), (_, is))| was.iter().zip(is));
    let mut counted = 0;
    for (was, is) in records {
        let (Some(w), Some(i)) = (was.quarantine, is.quarantine) else {
            assert_eq!(was.quarantine.is_some(), is.quarantine.is_some());
            continue;
        };
        counted += 1;
        assert_eq!(w.reason, i.reason);
        assert!(i.until >= now, "a window rebased before now");
        assert!(i.until <= w.until.max(now), "a window rebased later");
    }
    assert_eq!(windows, counted, "rebase miscounted its windows");
    encode(&state, now).expect("a rebased state encodes");
}
