"""Assertions shared by the client tests: what 'consumed correctly' means."""


def check_partitions(rows, expected_values):
    """rows: (partition, offset, value) as consumed from the beginning.

    Every partition's offsets must be contiguous from 0, every produced value
    must appear exactly once, and within a partition values must keep the
    order they were produced in (values end in their sequence number)."""
    by_partition = {}
    for partition, offset, value in rows:
        by_partition.setdefault(partition, []).append((offset, value))
    seen = []
    for partition, records in by_partition.items():
        offsets = [o for o, _ in records]
        assert offsets == list(range(len(records))), f"partition {partition} offsets not contiguous from 0"
        sequence = [int(v.rsplit("-", 1)[1]) for _, v in records]
        assert sequence == sorted(sequence), f"partition {partition} out of produce order"
        seen.extend(v for _, v in records)
    assert len(seen) == len(expected_values), f"consumed {len(seen)}, produced {len(expected_values)}"
    assert sorted(seen) == sorted(expected_values), "consumed values differ from produced ones"
    return by_partition
