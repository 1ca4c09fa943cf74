"""Repository-wide pytest hook: tests that need root, network namespaces or built binaries skip
on a developer laptop, but under CI=true a skip is a failure, so a green CI run means they ran."""
import os

import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.skipped and os.environ.get("CI") == "true":
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped under CI=true (tests must run, not skip): {reason}"
