//! `PHALANX_BACKEND` read by `init_process_group` (one test in this binary: it sets the variable).

#[test]
fn init_process_group_follows_phalanx_backend() {
    std::env::set_var("PHALANX_BACKEND", "gloo");
    let e = phalanx_pg::init_process_group().unwrap_err().to_string();
    assert!(
        e.contains("PHALANX_BACKEND") && e.contains("\"gloo\""),
        "{e}"
    );
    if !phalanx_pg::BackendType::Mpi.is_built() {
        std::env::set_var("PHALANX_BACKEND", "mpi");
        let e = phalanx_pg::init_process_group().unwrap_err().to_string();
        assert!(e.contains("mpi") && e.contains("feature"), "{e}");
    }
    std::env::set_var("PHALANX_BACKEND", "native");
    let pg = phalanx_pg::init_process_group().unwrap();
    assert_eq!((pg.rank(), pg.world_size()), (0, 1));
}
