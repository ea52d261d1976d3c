"""Standalone reproduction: CP-SAT (ortools 9.15.6755) proves a feasible model infeasible.

Found by tests/test_differential.py (graph seed 271, docs/benchmarks_notes.md, "Differential
testing") and reduced from twill's register family to the constraints below. The trigger is a
cumulative whose capacity is a variable while an interval carries a variable demand. twill's
model no longer builds that form: the full copies' words now come off the capacity.

Run ``python tests/data/cpsat_cumulative_bug.py``: the first solve says INFEASIBLE, the second,
with a witness fixed, says OPTIMAL. It prints and asserts nothing when imported.
"""

from ortools.sat.python import cp_model


def build() -> tuple[cp_model.CpModel, dict[str, cp_model.IntVar]]:
    m = cp_model.CpModel()
    ii = 9
    start0, start2, start3 = (m.new_int_var(0, 153, f"start{i}") for i in (0, 2, 3))
    m.add_modulo_equality(1, start0, ii)
    m.add_modulo_equality(7, start2, ii)
    m.add_modulo_equality(4, start3, ii)
    warps = m.new_int_var_from_domain(cp_model.Domain.from_values([0, 1, 2, 4]), "warps")
    regs = m.new_int_var(0, 4, "regs")
    words = m.new_int_var(0, 16, "words")
    m.add_multiplication_equality(words, [warps, regs])
    room = m.new_int_var(0, 512, "room")
    m.add(room == 32 * words - 32 * warps)
    m.add(start3 - start0 >= 4)
    end0 = m.new_int_var(0, 321, "end0")
    m.add_max_equality(end0, [start2 + 4, start3 + 6])
    life0 = m.new_int_var(0, 321, "life0")
    m.add(life0 == end0 - start0)
    full0 = m.new_int_var(0, 36, "full0")
    full0_ii = m.new_int_var(0, 321, "full0_ii")
    m.add_multiplication_equality(full0_ii, [full0, ii])
    m.add(life0 == full0_ii)
    window = m.new_fixed_size_interval_var(0, ii, "window")
    arc_a = m.new_fixed_size_interval_var(4, 6, "arc_a")  # [4, 10)
    arc_b = m.new_fixed_size_interval_var(-5, 6, "arc_b")  # [-5, 1)
    m.add_cumulative([arc_a, arc_b, window, window], [48, 48, 32 * full0, 96], room)
    return m, {"warps": warps, "regs": regs, "start0": start0, "start2": start2, "start3": start3}


def main() -> None:
    m, _ = build()
    s = cp_model.CpSolver()
    s.parameters.num_workers = 1
    print("CP-SAT on the model:", s.status_name(s.solve(m)))
    # witness: warps 4, regs 3 (room 256); starts 1, 7, 13 (end0 19, life0 18, full0 2);
    # the load on [4, 9) is 48 + 32 x 2 + 96 = 208 <= 256
    w, x = build()
    for name, value in (("warps", 4), ("regs", 3), ("start0", 1), ("start2", 7), ("start3", 13)):
        w.add(x[name] == value)
    print("CP-SAT with the witness fixed:", s.status_name(s.solve(w)))


if __name__ == "__main__":
    main()
