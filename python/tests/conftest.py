def pytest_configure(config):
    config.addinivalue_line("markers", "s3: needs the test radosgw (ctest python_binding_s3, with CTest's rgw fixture)")
