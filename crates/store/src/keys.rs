//! The store's key schema: every key that more than one crate reads or writes, spelled once.
//!
//! The launcher's agents keep their own keys under `agent/<round>/`; each restart round's
//! workers keep theirs under `round/<round>/` (`PHALANX_STORE_PREFIX`, applied with
//! [`PrefixStore`](crate::PrefixStore)), so a restarted group never reads a stale key. Inside
//! a round, a rank publishes why it failed (`error/<rank>`) and what it waits for
//! (`status/<rank>`); the launcher reads both for its failure report.
//!
//! ```
//! use phalanx_store::keys;
//! assert_eq!(keys::round_prefix(2), "round/2");
//! assert_eq!(keys::in_round(2, &keys::error(5)), "round/2/error/5");
//! assert_eq!(keys::agent(0, "failed"), "agent/0/failed");
//! ```

/// The prefix of round `round`'s worker keys (`PHALANX_STORE_PREFIX`).
pub fn round_prefix(round: u32) -> String {
    format!("round/{round}")
}

/// Key `key` of round `round`, as the launcher reads it from outside the round's prefix.
pub fn in_round(round: u32, key: &str) -> String {
    format!("{}/{key}", round_prefix(round))
}

/// An agent's key `what` in round `round` (rendezvous claims, the round's failure, barriers).
pub fn agent(round: u32, what: &str) -> String {
    format!("agent/{round}/{what}")
}

/// Why rank `rank` failed, in its own words (first writer wins).
pub fn error(rank: impl std::fmt::Display) -> String {
    format!("error/{rank}")
}

/// What rank `rank` is waiting for, published when a collective fails or stalls.
pub fn status(rank: impl std::fmt::Display) -> String {
    format!("status/{rank}")
}

/// The round's newest process-group generation under `--fault-tolerance` (a counter, `add`):
/// whoever changes the membership bumps it and then writes [`generation_change`] (Note
/// [FT generations] in phalanx-pg).
pub const GENERATION: &str = "ft/generation";

/// How generation `generation` differs from the one before: `-<slot>` (that rank died),
/// `+<slot>` (its replacement, or a rank of a node admitted into the round, is ready to join)
/// or `end` (the run finished: nobody joins any more).
pub fn generation_change(generation: u64) -> String {
    format!("ft/{generation}/change")
}

/// Appends a membership change to the generation log of the round `round` addresses (a store
/// scoped to the round, or the launcher's with [`in_round`] keys through `scope`): bumps
/// [`GENERATION`] first, then writes `what` as that generation's change, so every reader folds
/// the same log (Note [FT generations] in phalanx-pg). Returns the new generation.
pub fn append_generation_change(
    store: &dyn crate::Store,
    scope: &dyn Fn(&str) -> String,
    what: &str,
) -> crate::Result<u64> {
    let generation = bump_generation(store, scope)?;
    write_generation_change(store, scope, generation, what)?;
    Ok(generation)
}

/// The round's newest generation, as [`GENERATION`] holds it (0 before any change), in a
/// store scoped to the round.
pub fn read_generation(store: &dyn crate::Store) -> crate::Result<u64> {
    Ok(store.add(GENERATION, 0)?.max(0) as u64)
}

/// [`read_generation`] for a poll: without waiting or writing, possibly a moment behind
/// ([`Store::peek`](crate::Store::peek)).
pub fn peek_generation(store: &dyn crate::Store) -> crate::Result<u64> {
    let value = store.peek(GENERATION)?;
    Ok(crate::table::added(GENERATION, value.as_deref(), 0)?.max(0) as u64)
}

/// The first half of [`append_generation_change`]: takes the next generation. A writer that
/// must retry after a failure retries the half that failed (a second bump would leave a
/// generation without its change, which every reader waits for).
pub fn bump_generation(
    store: &dyn crate::Store,
    scope: &dyn Fn(&str) -> String,
) -> crate::Result<u64> {
    Ok(store.add(&scope(GENERATION), 1)?.max(0) as u64)
}

/// The second half of [`append_generation_change`]: writes `what` as `generation`'s change.
pub fn write_generation_change(
    store: &dyn crate::Store,
    scope: &dyn Fn(&str) -> String,
    generation: u64,
    what: &str,
) -> crate::Result<()> {
    store.set(&scope(&generation_change(generation)), what.as_bytes())
}

/// Set by every rank that connects generation `generation` (Note [FT generations] in phalanx-pg):
/// a replacement waits for it before it connects, so that it never waits in a generation that
/// nobody else will form (the run may end first).
pub fn generation_open(generation: u64) -> String {
    format!("ft/{generation}/open")
}

/// Set (under the round's prefix) by a worker that re-forms its process group itself: a Python
/// program through `phalanx_torch.ft.Manager`. The launcher cannot tell a Python program that
/// does from one that does not, so it replaces a dead Python worker alone only once this key
/// is there, and restarts the group otherwise (Note [FT generations] in phalanx-pg).
pub const FT_TAKES_PART: &str = "ft/takes_part";

/// The key prefix of generation `generation` inside a round: generation 0 is the round's own
/// prefix, a later one `ft/<generation>` under it, so no generation reads another's keys.
pub fn generation_prefix(generation: u64) -> Option<String> {
    (generation > 0).then(|| format!("ft/{generation}"))
}

/// Set by the store server (its first refusal wins) when it refused a PyTorch TCPStore client:
/// why, and who. The launcher ends the job with it at once, rather than letting PyTorch retry
/// until its 30-minute timeout. See Note [Two protocols on one port].
pub const TORCH_REFUSED: &str = "torch_refused";
