//! The conformance suite, unchanged, against every backend and transport.

mod memory {
    wsfs_tests::conformance_suite!(wsfs_tests::harness::memory());
}

mod directory {
    wsfs_tests::conformance_suite!(wsfs_tests::harness::directory());
}

mod grpc_memory {
    wsfs_tests::conformance_suite!(wsfs_tests::harness::grpc_memory());
}

mod grpc_directory {
    wsfs_tests::conformance_suite!(wsfs_tests::harness::grpc_directory());
}

mod grpc_container {
    wsfs_tests::conformance_suite!(wsfs_tests::harness::grpc_container(env!(
        "CARGO_BIN_EXE_wsfs-stdio"
    )));
}

mod grpc_proxy {
    wsfs_tests::conformance_suite!(wsfs_tests::harness::grpc_proxy());
}
