import pytest

from bench.harness.cpu_profile import (COPIES, KERNEL, REDUCTIONS, USER_OTHER, bucket, parse_report,
                                       perf_record_argv, summarize, summary_line)

REPORT = """
# To display the perf.data header info, please use --header/--header-only options.
#
    31.20%  [kernel.kallsyms]  [k] copy_user_generic_string
    22.00%  nezha-bench        [.] void nezha::reduceInto<float>(float*, float const*, unsigned long)
    18.50%  [kernel.kallsyms]  [k] tcp_sendmsg_locked
     9.30%  libc.so.6          [.] __memmove_avx_unaligned_erms
     7.00%  nezha-bench        [.] nezha::TcpChannel::pump()
     2.00%  gloo-bench         [.] void gloo::sum<float>(void*, void const*, void const*, unsigned long)
"""


def test_parse_report_reads_every_symbol_line_and_skips_the_rest():
    got = parse_report(REPORT)
    assert [s.percent for s in got] == [31.2, 22.0, 18.5, 9.3, 7.0, 2.0]
    assert got[0].kernel and not got[1].kernel and got[1].dso == "nezha-bench"
    assert got[1].symbol.startswith("void nezha::reduceInto<float>")


def test_buckets_copies_reductions_kernel_and_user():
    got = [bucket(s) for s in parse_report(REPORT)]
    assert got == [COPIES, REDUCTIONS, KERNEL, COPIES, USER_OTHER, REDUCTIONS]


def test_summarize_sums_buckets_and_ranks_the_hottest():
    prof = summarize(parse_report(REPORT), top=2)
    assert prof["buckets"] == {COPIES: 40.5, REDUCTIONS: 24.0, KERNEL: 18.5, USER_OTHER: 7.0}
    assert [p for p, _, _ in prof["top"]] == [31.2, 22.0]
    line = summary_line("nezha-adaptive 16M", prof)
    assert line.startswith("nezha-adaptive 16M: copies 40 %, reductions 24 %")
    assert "copy_user_generic_string 31 %" in line
    with pytest.raises(ValueError, match="no samples"):
        summarize(parse_report("# nothing\n"))


def test_perf_record_profiles_one_process_with_self_time_only():
    argv = perf_record_argv("/tmp/x.data")
    assert argv[:2] == ["perf", "record"] and argv[-1] == "--" and "-g" not in argv and "-a" not in argv
