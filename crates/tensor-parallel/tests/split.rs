//! Layers split across a tensor-parallel group on 2 and 4 ranks (threads) against the whole
//! layers on one: Megatron's MLP blocks (`mlp`), the same under sequence parallelism
//! (`sequence`), and the vocabulary (`vocab`).

mod split {
    pub(crate) mod common;
    mod mlp;
    mod sequence;
    mod vocab;
}
