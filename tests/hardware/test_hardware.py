"""Tests for astitch_sim.hardware.gpus: GPU presets and CUDA occupancy rules.

Each expected number is worked out by hand in the comment next to it, using
the rules in the module docstring (the same ones as NVIDIA's cudaOccupancy.h).
"""

import dataclasses

import pytest

from astitch_sim.errors import AStitchError
from astitch_sim.hardware.gpus import GPU, GPUS, LIMITING_FACTORS, Occupancy, gpu

V100 = GPUS["V100"]
A100 = GPUS["A100"]
H100 = GPUS["H100"]
H200 = GPUS["H200"]
KIB = 1024


# ---------------------------------------------------------------------------
# threads / warps / blocks limits
# ---------------------------------------------------------------------------

def test_v100_1024_thread_blocks_run_160_per_wave_as_in_paper():
    # 1024 threads = 32 warps; 2048 threads/SM -> 2 blocks; 80 SMs -> 160.
    occ = V100.occupancy(1024)
    assert isinstance(occ, Occupancy)
    assert occ.blocks_per_sm == 2
    assert occ.blocks_per_wave == 160
    assert V100.blocks_per_sm(1024) == 2
    assert V100.blocks_per_wave(1024) == 160
    assert occ.active_warps == 64
    assert occ.occupancy == pytest.approx(1.0)
    # threads, warps and registers (32 regs) all allow exactly 2; ties are
    # reported in LIMITING_FACTORS order, so "threads".
    assert occ.limiting_factor == "threads"
    assert occ.limits["warps"] == 2 and occ.limits["registers"] == 2


def test_tiny_blocks_are_limited_by_blocks_per_sm():
    # 32 threads = 1 warp: threads allow 64, warps 64, but only 32 blocks/SM.
    occ = V100.occupancy(32)
    assert occ.blocks_per_sm == 32
    assert occ.limiting_factor == "blocks"
    assert occ.blocks_per_wave == 32 * 80 == 2560
    assert occ.active_warps == 32
    assert occ.occupancy == pytest.approx(0.5)


def test_threads_round_up_to_whole_warps():
    # 65 threads occupy 3 warps (96 thread slots): 2048 // 96 = 21 blocks,
    # not 2048 // 65 = 31.
    occ = V100.occupancy(65)
    assert occ.warps_per_block == 3
    assert occ.blocks_per_sm == 21
    assert occ.limiting_factor == "threads"
    assert occ.active_warps == 63
    # 993 threads cost the same 32 warps as 1024.
    assert V100.blocks_per_sm(993) == V100.blocks_per_sm(1024) == 2


def test_h100_big_blocks_use_132_sms():
    assert H100.blocks_per_wave(1024) == 2 * 132 == 264
    assert H200.blocks_per_wave(1024) == 264
    assert A100.blocks_per_wave(1024) == 2 * 108 == 216


# ---------------------------------------------------------------------------
# registers
# ---------------------------------------------------------------------------

def test_registers_limit_256_threads_128_regs():
    # 128 regs * 32 threads = 4096 regs/warp; 8 warps/block -> 32768/block;
    # 65536 / 32768 = 2 blocks.
    occ = V100.occupancy(256, registers_per_thread=128)
    assert occ.blocks_per_sm == 2
    assert occ.limiting_factor == "registers"
    assert occ.active_warps == 16
    assert occ.occupancy == pytest.approx(0.25)


def test_register_allocation_rounds_up_per_warp():
    # 33 regs * 32 = 1056 -> rounded to 1280 (5 x 256) per warp.
    # Per sub-partition 16384 // 1280 = 12 warps -> 48 warps/SM -> 48 // 8 = 6.
    assert V100.blocks_per_sm(256, registers_per_thread=33) == 6
    # 32 regs = 1024/warp, no rounding: 64 warps fit, threads limit 8 binds.
    assert V100.blocks_per_sm(256, registers_per_thread=32) == 8


def test_register_file_is_split_into_four_partitions():
    # 40 regs -> 1280 regs/warp. The naive 65536 // 1280 = 51 warps would
    # allow 51 // 3 = 17 blocks of 96 threads; per partition it is
    # 16384 // 1280 = 12 warps, x4 = 48 warps -> 16 blocks.
    occ = V100.occupancy(96, registers_per_thread=40)
    assert occ.blocks_per_sm == 16
    assert occ.limiting_factor == "registers"
    assert occ.active_warps == 48


def test_max_registers_fit_one_1024_thread_block():
    # 64 regs * 1024 threads = 65536 registers: exactly one block.
    occ = V100.occupancy(1024, registers_per_thread=64)
    assert occ.blocks_per_sm == 1
    assert occ.limiting_factor == "registers"


def test_too_many_registers_for_any_block_is_an_error_with_a_fix():
    # 65 regs -> 2080 -> 2304/warp, x32 warps = 73728 > 65536.
    with pytest.raises(AStitchError) as err:
        V100.blocks_per_sm(1024, registers_per_thread=65)
    msg = str(err.value)
    assert "73728" in msg and "65536" in msg
    assert "64" in msg  # the largest register count that would fit
    assert "fewer threads" in msg


# ---------------------------------------------------------------------------
# shared memory
# ---------------------------------------------------------------------------

def test_h100_100_kib_shared_gives_two_blocks():
    # 102400 + 1024 reserved = 103424 (already a multiple of 128);
    # 233472 // 103424 = 2.
    occ = H100.occupancy(256, shared_bytes=100 * KIB)
    assert occ.blocks_per_sm == 2
    assert occ.limiting_factor == "shared"
    assert occ.limits["shared"] == 2
    assert occ.blocks_per_wave == 264


def test_h100_reservation_can_cost_a_block():
    # 114 KiB = 116736 = exactly half of 228 KiB, but + 1 KiB reserved
    # = 117760 per block -> only 1 fits.  113 KiB + 1 KiB = 114 KiB -> 2 fit.
    assert H100.blocks_per_sm(256, shared_bytes=114 * KIB) == 1
    assert H100.blocks_per_sm(256, shared_bytes=113 * KIB) == 2
    # Same story on A100: 82 KiB is half of 164 KiB, the reservation breaks it.
    assert A100.blocks_per_sm(256, shared_bytes=82 * KIB) == 1
    assert A100.blocks_per_sm(256, shared_bytes=81 * KIB) == 2


def test_reservation_applies_even_without_shared_memory_on_cc8():
    # A100: 167936 // 1024 = 164 blocks by shared memory alone.
    assert A100.occupancy(32).limits["shared"] == 164
    # V100 has no reservation: no shared memory means no shared limit binds.
    assert V100.occupancy(32).limiting_factor == "blocks"


def test_shared_rounds_up_to_allocation_unit():
    # V100 unit 256: 3072 B -> 98304 // 3072 = 32 (ties with the block limit);
    # 3073 B -> 3328 B -> 98304 // 3328 = 29.
    assert V100.blocks_per_sm(32, shared_bytes=3072) == 32
    occ = V100.occupancy(32, shared_bytes=3073)
    assert occ.blocks_per_sm == 29
    assert occ.limiting_factor == "shared"
    # A100 unit 128, 1 KiB reserved: 4224 + 1024 = 5248 = 41 x 128 and
    # 167936 // 5248 = 32; one byte more: 5249 -> 5376, 167936 // 5376 = 31.
    assert A100.blocks_per_sm(32, shared_bytes=4224) == 32
    assert A100.blocks_per_sm(32, shared_bytes=4225) == 31


@pytest.mark.parametrize("name", list(GPUS))
def test_opt_in_maximum_fits_exactly_one_block(name):
    g = GPUS[name]
    occ = g.occupancy(128, shared_bytes=g.shared_per_block_optin)
    assert occ.blocks_per_sm == 1
    assert occ.limiting_factor == "shared"


# ---------------------------------------------------------------------------
# waves
# ---------------------------------------------------------------------------

def test_waves_is_ceiling_of_blocks_over_wave_size():
    assert V100.waves(160, 1024) == 1
    assert V100.waves(161, 1024) == 2   # the tail effect: 1 block in wave 2
    assert V100.waves(320, 1024) == 2
    assert V100.waves(0, 1024) == 0
    assert V100.waves(2561, 32) == 2
    assert H100.waves(265, 256, shared_bytes=100 * KIB) == 2


def test_waves_rejects_negative_or_non_integer_blocks():
    with pytest.raises(AStitchError, match="negative"):
        V100.waves(-1, 256)
    with pytest.raises(AStitchError, match="integer"):
        V100.waves(2.5, 256)


# ---------------------------------------------------------------------------
# validation errors
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("threads", [0, -32, 1025, 2048])
def test_bad_thread_counts(threads):
    with pytest.raises(AStitchError) as err:
        V100.blocks_per_sm(threads)
    msg = str(err.value)
    assert "threads_per_block" in msg and "1024" in msg and str(threads) in msg


@pytest.mark.parametrize("regs", [0, -1, 256])
def test_bad_register_counts(regs):
    with pytest.raises(AStitchError) as err:
        V100.occupancy(128, registers_per_thread=regs)
    assert "registers_per_thread" in str(err.value)
    assert "255" in str(err.value)


def test_shared_over_opt_in_limit():
    with pytest.raises(AStitchError) as err:
        V100.occupancy(128, shared_bytes=96 * KIB + 1)
    msg = str(err.value)
    assert "98305" in msg and "98304" in msg and "V100" in msg
    # The same amount is fine on H100 (227 KiB opt-in).
    assert H100.blocks_per_sm(128, shared_bytes=96 * KIB + 1) == 2
    with pytest.raises(AStitchError, match="232448"):
        H100.occupancy(128, shared_bytes=227 * KIB + 1)


def test_negative_shared_and_non_integers_rejected():
    with pytest.raises(AStitchError, match="negative"):
        V100.occupancy(128, shared_bytes=-1)
    with pytest.raises(AStitchError, match="integer"):
        V100.occupancy(128.0)
    with pytest.raises(AStitchError, match="integer"):
        V100.occupancy(True)
    # AStitchError is a ValueError, so generic handlers still work.
    with pytest.raises(ValueError):
        V100.occupancy(0)


# ---------------------------------------------------------------------------
# invariants over a grid of configurations
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(GPUS))
def test_occupancy_invariants(name):
    g = GPUS[name]
    for threads in (1, 32, 33, 64, 96, 128, 192, 256, 384, 512, 640, 768, 1024):
        prev_regs = None
        for regs in (1, 16, 24, 32, 40, 48, 64, 72, 96, 128, 168, 255):
            try:
                occ = g.occupancy(threads, registers_per_thread=regs)
            except AStitchError:
                # Once a register count fails, every larger one must fail too.
                prev_regs = 0
                continue
            assert prev_regs != 0, "more registers cannot make a block fit again"
            assert 1 <= occ.blocks_per_sm <= g.max_blocks_per_sm
            assert occ.blocks_per_sm == min(occ.limits.values())
            assert occ.limits[occ.limiting_factor] == occ.blocks_per_sm
            assert occ.limiting_factor in LIMITING_FACTORS
            assert occ.active_warps <= g.max_warps_per_sm
            assert 0 < occ.occupancy <= 1
            assert occ.blocks_per_wave == occ.blocks_per_sm * g.sms
            if prev_regs is not None:
                assert occ.blocks_per_sm <= prev_regs
            prev_regs = occ.blocks_per_sm
        prev_shared = None
        for shared in (0, 1, 1000, 4 * KIB, 16 * KIB, 48 * KIB, 90 * KIB):
            bps = g.blocks_per_sm(threads, shared_bytes=shared)
            if prev_shared is not None:
                assert bps <= prev_shared
            prev_shared = bps


# ---------------------------------------------------------------------------
# presets and lookup
# ---------------------------------------------------------------------------

def test_preset_table_values():
    assert set(GPUS) == {"V100", "A100", "H100", "H200"}
    for key, g in GPUS.items():
        assert g.name == key
        assert g.max_warps_per_sm * g.warp_size == g.max_threads_per_sm
        assert g.measured_bandwidth_gbs < g.dram_bandwidth_gbs
        assert g.shared_per_block_optin + g.shared_reserved_per_block == g.shared_per_sm
        assert g.shared_per_block_default == 48 * KIB
    assert (V100.sms, A100.sms, H100.sms, H200.sms) == (80, 108, 132, 132)
    assert A100.shared_per_sm == 167936 and A100.shared_per_block_optin == 166912
    assert H100.shared_per_sm == 233472 and H100.shared_per_block_optin == 232448
    assert V100.shared_reserved_per_block == 0 and H100.shared_reserved_per_block == 1024
    assert (H100.measured_bandwidth_gbs, H200.measured_bandwidth_gbs) == (3000.0, 4300.0)
    assert 2.5 <= V100.grid_barrier_us <= 2.7
    assert V100.compute_capability == (7, 0) and H200.compute_capability == (9, 0)


def test_presets_are_immutable():
    with pytest.raises(dataclasses.FrozenInstanceError):
        V100.sms = 1


def test_gpu_lookup_is_case_insensitive():
    assert gpu("h100") is H100
    assert gpu("H100") is H100
    assert gpu(" a100 ") is A100
    assert gpu("v100") is V100
    assert gpu("H200") is H200


def test_gpu_passes_gpu_objects_through():
    custom = dataclasses.replace(V100, name="V100-slow-launch", kernel_launch_us=10.0)
    assert gpu(custom) is custom
    assert gpu(custom).blocks_per_wave(1024) == 160


def test_unknown_gpu_lists_known_names():
    with pytest.raises(AStitchError) as err:
        gpu("B200")
    msg = str(err.value)
    assert "B200" in msg
    for name in ("V100", "A100", "H100", "H200"):
        assert name in msg
    with pytest.raises(AStitchError, match="V100"):
        gpu(100)


def test_describe_mentions_key_numbers():
    text = H100.describe()
    assert "H100" in text
    assert "132 SMs" in text
    assert "9.0" in text
    assert "228 KiB" in text
    assert len(text.splitlines()) >= 3
    assert isinstance(GPU, type)


def test_an_occupancy_report_is_worked_out_once_and_handed_out_as_a_copy():
    """A preset is immutable, so a launch shape's report is kept and handed out again (the SIMT model asks it
    thousands of times per simulation): the same numbers each time, each caller its own dict of limits (changing
    one changes no other), the report still a plain dataclass (asdict, pickle), and a bool or a float still
    refused (``True == 1`` must not find the report of 1 thread)."""
    import pickle
    h100 = GPUS["H100"]
    first, again = h100.occupancy(256, 1024, 40), h100.occupancy(256, 1024, 40)
    assert again == first and again.limits is not first.limits
    first.limits["warps"] = 0
    assert h100.occupancy(256, 1024, 40).limits["warps"] == again.limits["warps"] > 0
    assert dataclasses.asdict(again)["limits"] == again.limits and pickle.loads(pickle.dumps(again)) == again
    assert h100.occupancy(1).blocks_per_sm == h100.occupancy(1, 0, 32).blocks_per_sm
    for bad in (True, 1.0):
        with pytest.raises(AStitchError):
            h100.occupancy(bad)
