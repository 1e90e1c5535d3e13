"""The traffic counter: replica groups read from JAX's compiled programs, checked against what
the collectives actually did when run, on several meshes and device orders; the cost model's
arithmetic; and clear errors for what it cannot count."""
from fractions import Fraction
from itertools import combinations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import P
from jax.sharding import Mesh, NamedSharding

from helpers.measure import traffic as T

DEVICES = np.array(jax.devices())
ORDERS = {
    "make_mesh": None,
    "interleaved": [0, 4, 1, 5, 2, 6, 3, 7],
    "shuffled": [3, 0, 6, 1, 7, 2, 5, 4],
}
SHAPES = {(2, 4): ("host", "device"), (4, 2): ("host", "device"), (2, 2, 2): ("a", "b", "c")}
MESHES = [(shape, order) for shape in SHAPES for order in ORDERS]
# Running collectives costs a compile per axis subset: these meshes cover every order on the
# (host, device) mesh, a taller one, and 3 axes (non-adjacent groups such as ('a', 'c')).
RUN_MESHES = [((2, 4), order) for order in ORDERS] + [((4, 2), "interleaved"), ((2, 2, 2), "shuffled")]


def build_mesh(shape, order):
    names = SHAPES[shape]
    if order is None:
        return jax.make_mesh(shape, names)
    return Mesh(DEVICES[ORDERS[order]].reshape(shape), names)


def axis_subsets(names):
    return [s for k in range(1, len(names) + 1) for s in combinations(names, k)]


def ids_per_device(mesh):
    """A global (N,) int array whose element on device d is d.id, one element per device."""
    spec = P(tuple(mesh.axis_names))
    ids = np.array([d.id for d in mesh.devices.flat], dtype=np.int32)
    return jax.device_put(ids, NamedSharding(mesh, spec)), spec


def run_and_parse(fn, x, kind):
    """Each device's output block when the compiled program runs, and its one collective of `kind`."""
    compiled = T.compile_program(fn, x)
    ran = {s.device: np.asarray(s.data) for s in compiled(x).addressable_shards}
    return ran, only(T.parse_collectives(compiled.as_text(), T.device_assignment(compiled)), kind)


def only(found, kind):
    chosen = [c for c in found if c.kind == kind]
    assert len(chosen) == 1, [c.kind for c in found]
    return chosen[0]


@pytest.mark.parametrize("shape,order", MESHES, ids=[f"{s}-{o}" for s, o in MESHES])
def test_device_assignment_is_the_mesh_order(shape, order):
    mesh = build_mesh(shape, order)
    x, spec = ids_per_device(mesh)
    compiled = T.compile_program(jax.shard_map(lambda b: b + 1, mesh=mesh, in_specs=spec, out_specs=spec), x)
    assert T.device_assignment(compiled) == list(mesh.devices.flat)


@pytest.mark.parametrize("shape,order", RUN_MESHES, ids=[f"{s}-{o}" for s, o in RUN_MESHES])
def test_all_reduce_groups_are_the_devices_psum_really_adds(shape, order):
    mesh = build_mesh(shape, order)
    x, spec = ids_per_device(mesh)
    for axes in axis_subsets(mesh.axis_names):
        fn = jax.shard_map(lambda b: jax.lax.psum(2 ** b, axes), mesh=mesh, in_specs=spec, out_specs=spec)
        ran, parsed = run_and_parse(fn, x, "all-reduce")
        really = {frozenset(i for i in range(8) if int(v[0]) >> i & 1) for v in ran.values()}
        assert {frozenset(g) for g in T.groups_as_ids(parsed)} == really, axes
        for d, v in ran.items():  # each device is in the group whose sum it received
            group = next(g for g in parsed.groups if d in g)
            assert int(v[0]) == sum(2 ** g.id for g in group)


@pytest.mark.parametrize("shape,order", RUN_MESHES, ids=[f"{s}-{o}" for s, o in RUN_MESHES])
def test_all_gather_groups_list_devices_in_the_order_jax_gathers_them(shape, order):
    mesh = build_mesh(shape, order)
    x, spec = ids_per_device(mesh)
    for axes in axis_subsets(mesh.axis_names):
        fn = jax.shard_map(lambda b: jax.lax.all_gather(b, axes, tiled=True), mesh=mesh, in_specs=spec,
                           out_specs=spec)
        ran, parsed = run_and_parse(fn, x, "all-gather")
        for d, gathered in ran.items():
            group = next(g for g in parsed.groups if d in g)
            assert [g.id for g in group] == gathered.tolist(), axes


@pytest.mark.parametrize("shape,order", RUN_MESHES, ids=[f"{s}-{o}" for s, o in RUN_MESHES])
def test_permute_pairs_are_who_really_sent_to_whom(shape, order):
    mesh = build_mesh(shape, order)
    x, spec = ids_per_device(mesh)
    for axes in axis_subsets(mesh.axis_names):
        n = int(np.prod([mesh.shape[a] for a in axes]))
        perm = [(i, (i + 1) % n) for i in range(n)]
        fn = jax.shard_map(lambda b: jax.lax.ppermute(b, axes, perm), mesh=mesh, in_specs=spec, out_specs=spec)
        ran, parsed = run_and_parse(fn, x, "collective-permute")
        assert sorted(T.groups_as_ids(parsed)) == sorted((int(v[0]), d.id) for d, v in ran.items()), axes


def one_id_per_device(mesh, layout):
    """A global int array, one dimension per mesh axis in `layout` order, whose one element on
    device d is 2 ** d.id."""
    order = [mesh.axis_names.index(a) for a in layout]
    values = np.vectorize(lambda d: 2 ** d.id)(mesh.devices).astype(np.int32).transpose(order)
    return jax.device_put(values, NamedSharding(mesh, P(*layout)))


@pytest.mark.parametrize("shape,order", RUN_MESHES, ids=[f"{s}-{o}" for s, o in RUN_MESHES])
def test_jit_all_reduce_groups_are_the_devices_its_sum_really_adds(shape, order):
    """jax.jit on a mesh writes replica_groups=mesh[...] {axes}: read them, then check them by running.

    The array's dimensions follow the mesh's axes, then the reverse order (which makes XLA write
    the mesh's devices as a transposed iota, device_ids=([..]T(..)))."""
    mesh = build_mesh(shape, order)
    for layout in (mesh.axis_names, mesh.axis_names[::-1]):
        x = one_id_per_device(mesh, layout)
        for axes in axis_subsets(mesh.axis_names):
            summed = tuple(layout.index(a) for a in axes)
            kept = P(*[a for a in layout if a not in axes])
            fn = jax.jit(lambda v: v.sum(axis=summed), out_shardings=NamedSharding(mesh, kept))
            compiled = T.compile_program(fn, x)
            assert "replica_groups=mesh[" in compiled.as_text()  # the form this test is about
            found = T.parse_collectives(compiled.as_text(), T.device_assignment(compiled))
            assert {c.kind for c in found} == {"all-reduce"}, axes
            value = {d: 2 ** d.id for d in mesh.devices.flat}  # what the parsed groups say each device ends with
            for reduce in found:  # XLA may sum one axis at a time: apply them in program order
                value = {d: sum(value[m] for m in next(g for g in reduce.groups if d in g)) for d in value}
            for shard in compiled(x).addressable_shards:
                assert int(np.asarray(shard.data).item()) == value[shard.device], (layout, axes)


@pytest.mark.parametrize("shape,order", RUN_MESHES, ids=[f"{s}-{o}" for s, o in RUN_MESHES])
def test_jit_all_gather_groups_list_devices_in_the_order_it_gathers_them(shape, order):
    mesh = build_mesh(shape, order)
    ids = np.vectorize(lambda d: d.id)(mesh.devices).astype(np.int32)
    x = jax.device_put(ids, NamedSharding(mesh, P(*mesh.axis_names)))
    for axis in mesh.axis_names:
        kept = P(*[None if a == axis else a for a in mesh.axis_names])
        compiled = T.compile_program(jax.jit(lambda v: v, out_shardings=NamedSharding(mesh, kept)), x)
        gather = only(T.parse_collectives(compiled.as_text(), T.device_assignment(compiled)), "all-gather")
        for shard in compiled(x).addressable_shards:
            group = next(g for g in gather.groups if shard.device in g)
            assert [d.id for d in group] == np.asarray(shard.data).ravel().tolist(), axis


def test_jit_and_shard_map_name_the_same_groups_for_the_same_sum():
    mesh = build_mesh((2, 4), "shuffled")
    spec = P(("host", "device"))
    x = jax.device_put(jnp.ones((8, 16)), NamedSharding(mesh, spec))
    by_jit = T.collectives(jax.jit(lambda v: v.sum(0), out_shardings=NamedSharding(mesh, P())), x)
    by_shard_map = T.collectives(jax.shard_map(lambda b: jax.lax.psum(b.sum(0), ("host", "device")), mesh=mesh,
                                               in_specs=spec, out_specs=P()), x)
    assert [sorted(T.groups_as_ids(c)) for c in by_jit] == [sorted(T.groups_as_ids(c)) for c in by_shard_map]


def test_the_traffic_of_a_jitted_step_with_its_own_out_shardings():
    """The review's example: a jitted function is compiled as it is, and its groups are read."""
    mesh = jax.make_mesh((2, 4), ("host", "device"))
    x = jax.device_put(jnp.ones((8, 16)), NamedSharding(mesh, P(("host", "device"))))
    report = T.traffic(jax.jit(lambda v: v.sum(0), out_shardings=NamedSharding(mesh, P())), x,
                       host_of=T.hosts_along(mesh))
    (reduce,) = report.collectives
    assert reduce.kind == "all-reduce" and T.groups_as_ids(reduce) == [list(range(8))]
    assert reduce.jax_op == "reduce_sum"
    assert (report.inside_hosts, report.across_hosts) == (6 * 112, 2 * 112)  # as the flat psum by hand


@pytest.mark.parametrize("order", list(ORDERS))
def test_the_order_the_axes_are_named_in_does_not_change_the_bytes(order):
    """psum over ('device', 'host') is psum over ('host', 'device'): the program lists its group in
    another order (and a reduce-scatter's pieces go to other devices), but the ring runs in the
    program's device order, so the bytes are the same."""
    mesh = build_mesh((2, 4), order)
    spec = P(("host", "device"))
    x = jax.device_put(jnp.ones((8, 16)), NamedSharding(mesh, spec))
    host_of = T.hosts_along(mesh)

    def count(body):
        report = T.traffic(jax.shard_map(body, mesh=mesh, in_specs=spec, out_specs=spec), x, host_of=host_of)
        return report, (report.inside_hosts, report.across_hosts)

    for axes in (("host", "device"), ("device", "host")):
        two_steps = lambda b, axes=axes: jax.lax.all_gather(  # noqa: E731
            jax.lax.psum_scatter(b, axes, scatter_dimension=1, tiled=True), axes, axis=1, tiled=True)
        psum, psum_bytes = count(lambda b, axes=axes: jax.lax.psum(b, axes))
        assert count(two_steps)[1] == psum_bytes, axes
        if order == "make_mesh":
            assert psum_bytes == (6 * 112, 2 * 112), axes  # the flat ring by hand, whichever order
            if axes == ("device", "host"):
                (reduce,) = psum.collectives
                assert T.groups_as_ids(reduce) == [[0, 4, 1, 5, 2, 6, 3, 7]]  # listed as named
                assert [d.id for d in reduce.rings[0]] == list(range(8))  # the ring: mesh order


@pytest.mark.parametrize("order", list(ORDERS))
def test_reduce_scatter_and_all_to_all_groups_on_a_host_device_mesh(order):
    mesh = build_mesh((2, 4), order)
    spec = P(("host", "device"))
    x = jax.device_put(np.arange(8 * 8, dtype=np.float32).reshape(8, 8), NamedSharding(mesh, spec))
    expected = {frozenset(d.id for d in row) for row in mesh.devices}  # the 'device' axis: one mesh row
    scatter = jax.shard_map(lambda b: jax.lax.psum_scatter(b, "device", scatter_dimension=1, tiled=True),
                            mesh=mesh, in_specs=spec, out_specs=spec)
    to_all = jax.shard_map(lambda b: jax.lax.all_to_all(b, "device", 1, 0, tiled=True),
                           mesh=mesh, in_specs=spec, out_specs=spec)
    for fn, kind in ((scatter, "reduce-scatter"), (to_all, "all-to-all")):
        parsed = only(T.collectives(fn, x), kind)
        assert {frozenset(g) for g in T.groups_as_ids(parsed)} == expected


def test_a_fori_loop_counts_each_iteration():
    mesh = jax.make_mesh((8,), ("all",))
    x = jax.device_put(jnp.ones((8, 4)), NamedSharding(mesh, P("all")))
    perm = [(i, (i + 1) % 8) for i in range(8)]

    def ring(b):
        return jax.lax.fori_loop(0, 5, lambda i, m: jax.lax.ppermute(m, "all", perm), b)

    fn = jax.shard_map(ring, mesh=mesh, in_specs=P("all"), out_specs=P("all"))
    (permute,) = T.collectives(fn, x)
    assert permute.repeats == 5
    report = T.traffic(fn, x, host_of=lambda d: d.id // 4)
    assert report.inside_hosts + report.across_hosts == 5 * 8 * 16  # 5 steps, 8 sends of 16 bytes


def test_a_loop_of_unknown_length_is_refused_with_a_reason():
    mesh = jax.make_mesh((8,), ("all",))
    x = jax.device_put(jnp.ones((8, 4)), NamedSharding(mesh, P("all")))
    perm = [(i, (i + 1) % 8) for i in range(8)]

    def until_big(b):
        return jax.lax.while_loop(lambda m: jnp.sum(m) < 100.0, lambda m: 2 * jax.lax.ppermute(m, "all", perm), b)

    fn = jax.shard_map(until_big, mesh=mesh, in_specs=P("all"), out_specs=P("all"), check_vma=False)
    with pytest.raises(ValueError, match="fixed trip count"):
        T.collectives(fn, x)


# ----------------------------------------------------------------------------- the cost model
D = jax.devices()


def test_ring_all_reduce_cost_per_hop():
    c = T.Collective("all-reduce", "ar", "psum", 64, (tuple(D[:4]), tuple(D[4:])))
    hops = c.transfers()
    assert len(hops) == 8 and {t.nbytes for t in hops} == {Fraction(2 * 3, 4) * 64}
    assert [(t.source.id, t.target.id) for t in hops[:4]] == [(0, 1), (1, 2), (2, 3), (3, 0)]


def test_flat_and_hierarchical_all_reduce_by_hand():
    hosts = {d: d.id // 4 for d in D}
    flat = T.Traffic((T.Collective("all-reduce", "a", "psum", 64, (tuple(D),)),), hosts)
    assert flat.across_hosts == 2 * Fraction(14, 8) * 64  # hops 3->4 and 7->0, 2*(8-1)/8 * B each
    assert flat.inside_hosts + flat.across_hosts == 2 * 7 * 64
    hier = T.Traffic((
        T.Collective("reduce-scatter", "r", "psum_scatter", 16, (tuple(D[:4]), tuple(D[4:]))),
        T.Collective("all-reduce", "a", "psum", 16, tuple((D[i], D[i + 4]) for i in range(4))),
        T.Collective("all-gather", "g", "all_gather", 64, (tuple(D[:4]), tuple(D[4:]))),
    ), hosts)
    assert hier.across_hosts == 4 * 2 * 16  # 4 pairs, 2 hops, (2*(2-1)/2) * 16 bytes each
    assert hier.inside_hosts == 2 * (4 * 3 * 16) + 2 * (4 * Fraction(3, 4) * 64)
    assert hier.across_hosts < flat.across_hosts


def test_permute_and_all_to_all_are_direct():
    hosts = {d: d.id // 4 for d in D}
    permute = T.Collective("collective-permute", "p", "ppermute", 8, (), ((D[0], D[4]), (D[1], D[1]), (D[2], D[3])))
    to_all = T.Collective("all-to-all", "t", "all_to_all", 32, ((D[0], D[1], D[4], D[5]),))
    report = T.Traffic((permute, to_all), hosts)
    assert report.split(permute) == (8, 8)  # the self-send is free
    assert report.split(to_all) == (4 * 8, 8 * 8)  # 12 sends of 32/4 bytes; 8 of them change host


def test_groups_of_one_move_nothing():
    c = T.Collective("all-reduce", "a", "psum", 64, tuple((d,) for d in D))
    assert c.transfers() == []


# ----------------------------------------------------------------------------- parsing details
def test_iota_replica_groups():
    assert T.replica_groups("replica_groups=[2,4]<=[8], dims", 8) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert T.replica_groups("replica_groups=[4,2]<=[2,4]T(1,0), x", 8) == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert T.replica_groups("replica_groups={}, to_apply=%add", 4) == [[0, 1, 2, 3]]


def test_mesh_axes_replica_groups():
    """XLA's mesh form: the mesh's logical ids, grouped along the axes in braces (sub-axes too).

    The sub-axis cases were checked once against XLA itself: the text compiled and run with
    2 ** id on each device (jaxlib 0.10.2)."""
    groups = T.replica_groups
    assert groups("replica_groups=mesh['a'=2,'b'=4] {'a'}, x", 8) == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert groups("replica_groups=mesh['a'=2,'b'=4] {'b'}, x", 8) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert groups("replica_groups=mesh['a'=2,'b'=4] {'b','a'}", 8) == [[0, 4, 1, 5, 2, 6, 3, 7]]
    assert groups("replica_groups=mesh['axis_0'=8,'axis_1'=1] {'axis_0'}, use", 8) == [list(range(8))]
    assert groups("replica_groups=mesh['a'=8] {}", 8) == [[d] for d in range(8)]
    transposed = "replica_groups=mesh['a'=4,'b'=2], device_ids=([2,4]T(1,0)) {'a'}"
    listed = "replica_groups=mesh['a'=4,'b'=2], device_ids=(0,4,1,5,2,6,3,7) {'a'}"
    assert groups(transposed, 8) == groups(listed, 8) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert groups("replica_groups=mesh['a'=8] {'a':(2)2}", 8) == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert groups("replica_groups=mesh['a'=8] {'a':(1)2,'a':(4)2}", 8) == [[0, 1, 4, 5], [2, 3, 6, 7]]
    assert groups("replica_groups=mesh['a'=8] {'a':(4)2,'a':(1)2}", 8) == [[0, 4, 1, 5], [2, 6, 3, 7]]
    with pytest.raises(ValueError, match="has 8 devices, but the program runs on 4"):
        groups("replica_groups=mesh['a'=2,'b'=4] {'a'}", 4)
    with pytest.raises(ValueError, match=r"along \['c'\]"):
        groups("replica_groups=mesh['a'=2,'b'=4] {'c'}", 8)


def test_the_jax_op_names_its_primitive():
    assert T._jax_op("jit(f)/psum_invariant") == "psum"
    assert T._jax_op("jit(step)/(transpose(jvp())/reduce_sum:transpose(jvp())/dot_general:jvp()/reduce_sum)") == \
        "reduce_sum+"


def test_the_pass_is_read_from_autodiffs_transpose_marker():
    assert T.autodiff_pass("jit(f)/shard_map/jvp()/psum_invariant") == "forward"
    assert T.autodiff_pass("jit(f)/transpose(jvp())/shard_map/reduce_scatter") == "backward"
    assert T.autodiff_pass("jit(f)/(jvp()/psum_invariant:transpose(jvp())/reduce_sum)") == "both"
    assert T.autodiff_pass("jit(f)/transpose(jvp())/(psum_invariant:reduce_sum)") == "backward"  # shared prefix
    assert T.autodiff_pass("") == "unknown"


def test_a_gradient_steps_collectives_carry_their_pass():
    mesh = jax.make_mesh((2, 4), ("host", "device"))
    x = jax.device_put(jnp.ones((8, 8)), NamedSharding(mesh, P("device")))
    w = jax.device_put(jnp.ones((8,)), NamedSharding(mesh, P("device")))

    def loss(w, x):  # all_gather forward; its gradient is a reduce-scatter
        return jax.lax.psum(jnp.sum(jnp.tanh(x @ jax.lax.all_gather(w, "device", tiled=True))), "device")

    fn = jax.shard_map(loss, mesh=mesh, in_specs=(P("device"), P("device")), out_specs=P())
    found = {(c.kind, T.autodiff_pass(c.op_name)) for c in T.collectives(jax.grad(fn), w, x)}
    assert ("all-gather", "forward") in found and ("reduce-scatter", "backward") in found


def test_a_collective_the_compiler_added_is_named_so():
    mesh = jax.make_mesh((2, 4), ("host", "device"))
    x = jax.device_put(jnp.ones((8, 16)), NamedSharding(mesh, P(("host", "device"))))
    (gather,) = T.collectives(jax.jit(lambda v: 2 * v, out_shardings=NamedSharding(mesh, P())), x)
    assert (gather.kind, gather.jax_op) == ("all-gather", "compiler")


def test_shape_bytes():
    assert T.shape_bytes("f32[1,8]{1,0}") == 32
    assert T.shape_bytes("(f32[1,1]{1,0}, bf16[4]{0}, /*index=2*/s8[3])") == 4 + 8 + 3
    assert T.shape_bytes("f32[]") == 4
    with pytest.raises(ValueError, match="unknown element type"):
        T.shape_bytes("q99[2]")


def test_text_that_is_not_hlo_is_refused():
    with pytest.raises(ValueError, match="not the text of a compiled HLO module"):
        T.parse_collectives("hello", list(D))


def test_async_collectives_are_refused_not_miscounted():
    hlo = ("HloModule m, num_partitions=2\n\nENTRY %main (p: f32[4]) -> f32[4] {\n"
           "  %p = f32[4]{0} parameter(0)\n"
           "  %s = (f32[4]{0}, f32[4]{0}) all-reduce-start(%p), replica_groups={{0,1}}, to_apply=%add\n"
           "  ROOT %d = f32[4]{0} all-reduce-done(%s)\n}\n")
    with pytest.raises(ValueError, match="asynchronous"):
        T.parse_collectives(hlo, list(D[:2]))


def test_a_group_naming_a_missing_device_is_refused():
    hlo = ("HloModule m, num_partitions=2\n\nENTRY %main (p: f32[4]) -> f32[4] {\n"
           "  ROOT %a = f32[4]{0} all-reduce(%p), replica_groups={{0,5}}, to_apply=%add\n}\n")
    with pytest.raises(ValueError, match="runs on 2 devices"):
        T.parse_collectives(hlo, list(D[:2]))


def test_no_collectives_no_traffic():
    mesh = jax.make_mesh((2, 4), ("host", "device"))
    x = jax.device_put(jnp.ones((8, 2)), NamedSharding(mesh, P(("host", "device"))))
    report = T.traffic(jax.shard_map(lambda b: 2 * b, mesh=mesh, in_specs=P(("host", "device")),
                                     out_specs=P(("host", "device"))), x)
    assert report.collectives == () and report.across_hosts == 0
    assert "no collectives" in str(report)


def test_hosts_along_reads_the_mesh_axis():
    mesh = build_mesh((2, 4), "interleaved")
    host_of = T.hosts_along(mesh)
    assert [host_of(d) for d in mesh.devices.flat] == [0] * 4 + [1] * 4
    with pytest.raises(ValueError, match="no axis 'rack'"):
        T.hosts_along(mesh, "rack")


def test_the_report_table_is_deterministic():
    mesh = jax.make_mesh((2, 4), ("host", "device"))
    spec = P(("host", "device"))
    x = jax.device_put(jnp.ones((8, 16)), NamedSharding(mesh, spec))
    fn = jax.shard_map(lambda b: jax.lax.psum(b, ("host", "device")), mesh=mesh, in_specs=spec, out_specs=spec)
    text = str(T.traffic(fn, x, host_of=T.hosts_along(mesh)))
    assert text == str(T.traffic(fn, x, host_of=T.hosts_along(mesh)))
    assert "all-reduce" in text and "psum" in text and "224 B" in text and "672 B" in text


def test_an_unrolled_loop_folds_into_one_row_with_the_same_totals():
    mesh = jax.make_mesh((2, 4), ("host", "device"))
    spec = P(("host", "device"))
    x = jax.device_put(jnp.ones((8, 16)), NamedSharding(mesh, spec))
    right = [(i, (i + 1) % 8) for i in range(8)]

    def ring(b):
        total = b
        for _ in range(7):
            b = jax.lax.ppermute(b, ("host", "device"), right)
            total = total + b
        return total

    report = T.traffic(jax.shard_map(ring, mesh=mesh, in_specs=spec, out_specs=spec), x, host_of=T.hosts_along(mesh))
    assert len(report.collectives) == 7
    (folded,) = report.folded()
    assert folded.repeats == 7
    assert T.Traffic((folded,), report.hosts).across_hosts == report.across_hosts == 7 * 2 * 64
    assert "collective-permute x7" in str(report) and "collective-permute x7" in T.compare({"ring": report})


def test_busiest_device_and_busiest_host():
    hosts = {d: d.id // 4 for d in D}
    two_steps = T.Traffic((
        T.Collective("all-reduce", "a", "psum", 64, (tuple(D[:4]), tuple(D[4:]))),
        T.Collective("all-reduce", "b", "psum", 64, tuple((D[i], D[i + 4]) for i in range(4))),
    ), hosts)
    assert two_steps.busiest_device_across() == 64  # each pair: one hop of 2*(2-1)/2 * 64 each way
    assert two_steps.busiest_host_across() == 4 * 64  # 4 devices of a host each send 64 bytes out
    table = T.compare({"two psums": two_steps})
    assert table.splitlines()[2].split()[-4:] == ["64", "B", "256", "B"]  # max per device, max per host
    to_all = T.Traffic((T.Collective("all-to-all", "t", "all_to_all", 64, (tuple(D),)),), hosts)
    assert to_all.busiest_device_across() == 4 * 8  # one device sends 8 bytes to each of 4 on the other host


def test_bytes_by_hand_for_the_notebooks_programs():
    """Notebook 13's numbers, counted by hand from the cost model, on the compiled programs."""
    mesh = jax.make_mesh((2, 4), ("host", "device"))
    data = ("host", "device")
    grads = jax.device_put(jnp.ones((8, 16)), NamedSharding(mesh, P(data)))  # 64 bytes per device

    def split(body, x=grads, in_spec=P(data), out_spec=P(data)):
        fn = jax.shard_map(body, mesh=mesh, in_specs=in_spec, out_specs=out_spec)
        report = T.traffic(fn, x, host_of=T.hosts_along(mesh))
        return [(c.kind, report.split(c)) for c in report.collectives]

    # flat psum: 8 hops of 2*7/8*64 = 112 B; 3->4 and 7->0 cross hosts
    assert split(lambda b: jax.lax.psum(b, data)) == [("all-reduce", (6 * 112, 2 * 112))]
    # hierarchical: reduce-scatter inside (result 16 B, 4 hops of 3*16 per host), all-reduce across
    # (4 pairs, 2 hops of 2*1/2*16), all-gather inside (result 64 B, 4 hops of 3/4*64 per host)
    hier = split(lambda b: jax.lax.all_gather(jax.lax.psum(
        jax.lax.psum_scatter(b, "device", scatter_dimension=1, tiled=True), "host"), "device", axis=1, tiled=True))
    assert hier == [("reduce-scatter", (8 * 48, 0)), ("all-reduce", (0, 8 * 16)), ("all-gather", (8 * 48, 0))]
    # all_to_all of 64 B per device: 8 devices send 8 B to each of 7 others, 4 of them on the other host
    to_all = split(lambda b: jax.lax.all_to_all(b, data, 1, 0, tiled=True), in_spec=P(data, None),
                   out_spec=P(None, data))
    assert to_all == [("all-to-all", (8 * 3 * 8, 8 * 4 * 8))]


def test_the_picture_has_one_row_per_folded_collective():
    from helpers.pictures.traffic import draw_traffic

    hosts = {d: d.id // 4 for d in D}
    permute = T.Collective("collective-permute", "p", "ppermute", 8, (), ((D[3], D[4]),))
    report = T.Traffic((permute, permute, T.Collective("all-gather", "g", "all_gather", 32, (tuple(D),))), hosts)
    assert len(draw_traffic(report).axes) == 2
    assert len(draw_traffic(T.Traffic((), {})).axes) == 0


def test_a_trip_count_is_read_wherever_backend_config_sits():
    hlo = ("HloModule m, num_partitions=2\n\n"
           "%body (p: f32[4]) -> f32[4] {\n"
           "  %p = f32[4]{0} parameter(0)\n"
           "  ROOT %c = f32[4]{0} collective-permute(%p), channel_id=1, source_target_pairs={{0,1},{1,0}}\n}\n\n"
           "%cond (p: f32[4]) -> pred[] {\n  ROOT %t = pred[] constant(true)\n}\n\n"
           "ENTRY %main (p: f32[4]) -> f32[4] {\n"
           "  %p = f32[4]{0} parameter(0)\n"
           '  ROOT %w = f32[4]{0} while(%p), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"3"}}, '
           'metadata={op_name="jit(f)/while"}\n}\n')
    (permute,) = T.parse_collectives(hlo, list(D[:2]))
    assert permute.repeats == 3 and T.groups_as_ids(permute) == [(0, 1), (1, 0)]


@pytest.mark.parametrize("shape", [(2, 4), (4, 2), (3, 2)])
def test_the_hierarchical_all_reduce_sends_fewer_bytes_across_hosts_than_the_flat_one(shape):
    mesh = jax.make_mesh(shape, ("host", "device"), devices=jax.devices()[: shape[0] * shape[1]])
    spec = P(("host", "device"))
    n = mesh.size
    x = jax.device_put(jnp.ones((n, 2 * n)), NamedSharding(mesh, spec))

    def hierarchical(b):
        piece = jax.lax.psum_scatter(b, "device", scatter_dimension=1, tiled=True)
        return jax.lax.all_gather(jax.lax.psum(piece, "host"), "device", axis=1, tiled=True)

    def run(body):
        return T.traffic(jax.shard_map(body, mesh=mesh, in_specs=spec, out_specs=spec), x, host_of=T.hosts_along(mesh))

    flat, hier = run(lambda b: jax.lax.psum(b, ("host", "device"))), run(hierarchical)
    hosts, nbytes = shape[0], 2 * n * 4
    assert flat.across_hosts == hosts * Fraction(2 * (n - 1), n) * nbytes  # one crossing hop per host
    assert hier.across_hosts == 2 * (hosts - 1) * nbytes  # D rings of H, each hop 2(H-1)/H * B/D
    assert hier.across_hosts < flat.across_hosts
    assert hier.busiest_device_across() < flat.busiest_device_across()
