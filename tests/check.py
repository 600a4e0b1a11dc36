"""Assertions shared by the client tests: what 'consumed correctly' means."""


def check_partitions(rows, expected_values):
    """rows: (partition, offset, value) as consumed from the beginning.

    Every partition's offsets must be contiguous from 0, every produced value
    must appear exactly once, and within a partition each producer's values
    must keep the order they were produced in (values are `<producer>-<n>`)."""
    by_partition = {}
    for partition, offset, value in rows:
        by_partition.setdefault(partition, []).append((offset, value))
    seen = []
    for partition, records in by_partition.items():
        offsets = [o for o, _ in records]
        assert offsets == list(range(len(records))), f"partition {partition} offsets not contiguous from 0"
        by_producer = {}
        for _, v in records:
            producer, n = v.rsplit("-", 1)
            by_producer.setdefault(producer, []).append(int(n))
        for producer, sequence in by_producer.items():
            assert sequence == sorted(sequence), f"partition {partition}: {producer} out of produce order"
        seen.extend(v for _, v in records)
    assert len(seen) == len(expected_values), f"consumed {len(seen)}, produced {len(expected_values)}"
    assert sorted(seen) == sorted(expected_values), "consumed values differ from produced ones"
    return by_partition
