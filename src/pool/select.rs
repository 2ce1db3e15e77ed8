//! Least-used backend choice, as a pure function over a pool's backends.
//!
//! Order of preference for one client connection:
//! 1. usable primaries it has not tried, fewest live connections first;
//! 2. while no primary is usable: usable backups it has not tried, likewise;
//! 3. fail open: every backend it has not tried, least recently failed first.
//!
//! A backend that cannot serve the pool's clients (`unfit`: its services,
//! protocol or chain; see [`node`](crate::pool::node)) is never chosen, not
//! even to fail open: a client it would reach bans the proxy's address.
//!
//! Within 1 and 2 a backend that lately refused the client's address (see
//! [`refused`](crate::pool::refused)) comes after every one that did not,
//! whatever their loads: steering only orders the choice, it turns no
//! client away. Ties go to config order. The cost is O(backends), whatever the number of
//! connections.

use tokio::time::Instant;

/// What selection needs to know about one backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate {
    /// `healthy` or `unknown`.
    pub usable: bool,
    /// A backup backend.
    pub backup: bool,
    /// Live client connections (connecting ones included).
    pub live: usize,
    /// Last failed connect, a client's or a probe's, if any.
    pub last_failure: Option<Instant>,
    /// Already tried (and failed) for this client connection.
    pub tried: bool,
    /// Lately closed a connection of this client's address at once.
    pub refused: bool,
    /// Cannot serve this pool's clients: never chosen.
    pub unfit: bool,
}

/// Index of the backend to try next, or `None` when every one was tried.
pub fn pick(cands: &[Candidate]) -> Option<usize> {
    let any_primary_usable = cands.iter().any(|c| c.usable && !c.backup && !c.unfit);
    let fewest = |want_backup: bool| {
        cands
            .iter()
            .enumerate()
            .filter(|(_, c)| c.usable && !c.tried && !c.unfit && c.backup == want_backup)
            .min_by_key(|(_, c)| (c.refused, c.live))
            .map(|(i, _)| i)
    };
    fewest(false)
        .or_else(|| (!any_primary_usable).then(|| fewest(true)).flatten())
        .or_else(|| {
            // `None < Some(_)`: a backend that never failed comes first.
            cands
                .iter()
                .enumerate()
                .filter(|(_, c)| !c.tried && !c.unfit)
                .min_by_key(|(_, c)| c.last_failure)
                .map(|(i, _)| i)
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn c(usable: bool, backup: bool, live: usize) -> Candidate {
        Candidate {
            usable,
            backup,
            live,
            last_failure: None,
            tried: false,
            refused: false,
            unfit: false,
        }
    }

    #[test]
    fn an_unfit_backend_is_never_chosen_not_even_to_fail_open() {
        let mut cands = [c(true, false, 9), c(true, false, 0), c(true, true, 0)];
        cands[1].unfit = true;
        assert_eq!(pick(&cands), Some(0), "the fit one, however busy");
        cands[0].unfit = true;
        assert_eq!(pick(&cands), Some(2), "no fit primary: the backup");
        cands[2].unfit = true;
        assert_eq!(pick(&cands), None, "none fit: none at all");
        let mut down = [c(false, false, 0), c(false, false, 0)];
        down[0].unfit = true;
        assert_eq!(pick(&down), Some(1), "fail open skips the unfit one");
        down[1].unfit = true;
        assert_eq!(pick(&down), None);
    }

    #[test]
    fn fewest_live_wins_and_ties_go_to_config_order() {
        assert_eq!(
            pick(&[c(true, false, 2), c(true, false, 1), c(true, false, 1)]),
            Some(1)
        );
        assert_eq!(pick(&[c(true, false, 0), c(true, false, 0)]), Some(0));
    }

    #[test]
    fn a_backend_that_refused_the_client_comes_last_but_is_not_barred() {
        let mut cands = [c(true, false, 0), c(true, false, 5), c(true, false, 9)];
        cands[0].refused = true;
        assert_eq!(
            pick(&cands),
            Some(1),
            "least used of those that did not refuse"
        );
        cands[1].refused = true;
        cands[2].refused = true;
        assert_eq!(pick(&cands), Some(0), "all refused: least used as usual");
        // A usable backup is not taken because the primaries refused.
        let cands = [c(true, false, 0), c(true, true, 0)];
        let refused = Candidate {
            refused: true,
            ..cands[0]
        };
        assert_eq!(pick(&[refused, cands[1]]), Some(0));
    }

    #[test]
    fn backups_only_while_no_primary_is_usable() {
        let mut cands = [c(true, false, 9), c(true, true, 0)];
        assert_eq!(pick(&cands), Some(0));
        cands[0].usable = false;
        assert_eq!(pick(&cands), Some(1));
    }

    #[test]
    fn tried_backends_are_skipped() {
        let mut cands = [c(true, false, 0), c(true, false, 5)];
        cands[0].tried = true;
        assert_eq!(pick(&cands), Some(1));
        cands[1].tried = true;
        assert_eq!(pick(&cands), None);
    }

    #[test]
    fn usable_backup_is_not_used_while_a_primary_is_usable_but_tried() {
        // The tried primary is still usable (its failure was not recorded
        // yet); the backup waits, fail open comes after.
        let mut cands = [c(true, false, 0), c(true, true, 0), c(false, false, 0)];
        cands[0].tried = true;
        assert_eq!(pick(&cands), Some(1), "fail open reaches untried ones");
    }

    #[test]
    fn fail_open_takes_least_recently_failed_first() {
        let t0 = Instant::now();
        let mut cands = [c(false, false, 0), c(false, false, 0), c(false, true, 0)];
        cands[0].last_failure = Some(t0 + Duration::from_secs(2));
        cands[1].last_failure = Some(t0 + Duration::from_secs(1));
        cands[2].last_failure = Some(t0 + Duration::from_secs(3));
        assert_eq!(pick(&cands), Some(1));
        cands[1].tried = true;
        assert_eq!(pick(&cands), Some(0));
        cands[0].tried = true;
        assert_eq!(pick(&cands), Some(2));
    }
}
