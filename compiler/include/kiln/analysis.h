// Questions passes and code generators ask of IR, each answered once here: what
// an expression reads, what may trap, what may be evaluated early, which names
// are free, and the one-level walks the passes build their own recursions on.
#pragma once

#include <functional>
#include <set>
#include <string>

#include "kiln/ir.h"
#include "kiln/loop_ir.h"

namespace kiln::ir {

// Calls f on each direct child of e (operands, indices, arguments; a Let's
// value and body), in order.
void for_each_child(const Expr& e, const std::function<void(const Expr&)>& f);

// e rebuilt with f applied to each direct child, keeping e's type; e itself
// when no child changed. For recursions that handle scopes or ranks
// themselves; IRMutator is the full walk.
Expr map_children(const Expr& e, const std::function<Expr(const Expr&)>& f);

// Whether e or any expression inside it satisfies pred.
bool any_subexpr(const Expr& e, const std::function<bool(const Expr&)>& pred);

// Whether e, or any expression in s, reads memory: a Load of a buffer or an
// Access of a computation.
bool reads_memory(const Expr& e);
bool reads_memory(const Stmt& s);

// Whether e calls something other than a math intrinsic (which may have side effects).
bool calls_unknown(const Expr& e);

// The one rule for what may trap: an integer division or modulo whose divisor
// is not a constant other than 0 and -1 (x / 0 traps, and so does INT_MIN / -1).
// Float arithmetic never traps. traps() is the rule for one node; may_trap
// asks it of every node of e, or of every expression in s.
bool traps(const Binary& b);
bool may_trap(const Expr& e);
bool may_trap(const Stmt& s);

// Whether e may be evaluated where the program would not have evaluated it
// (earlier, when a loop runs zero times, past a guard): it reads no memory,
// calls only math intrinsics, and cannot trap.
bool speculatable(const Expr& e);

// The names e reads that no Let inside e binds.
std::set<std::string> free_vars(const Expr& e);
// The names s reads that no loop, let or Let inside s binds.
std::set<std::string> free_vars(const Stmt& s);

// Every name e or s reads or binds (loop variables, lets): what a fresh name must avoid.
std::set<std::string> names_in(const Expr& e);
std::set<std::string> names_in(const Stmt& s);

}  // namespace kiln::ir
