//! One module per subcommand.
pub(crate) mod bench;
pub(crate) mod bench_allreduce;
pub(crate) mod env;
pub(crate) mod launch;
pub(crate) mod sampler;
pub(crate) mod sizes;
pub(crate) mod store;
pub(crate) mod train;
