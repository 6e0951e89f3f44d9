//! Layers split across a tensor-parallel group on 2 and 4 ranks (threads) against the whole
//! layers on one: Megatron's MLP blocks (`mlp`) and the vocabulary (`vocab`).

mod split {
    pub(crate) mod common;
    mod mlp;
    mod vocab;
}
