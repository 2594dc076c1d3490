// Malformed .kiln input: each case gives the exact message, stage and position.
#include <gtest/gtest.h>

#include <string>

#include "kiln/frontend.h"

namespace kiln {
namespace {

// Cases marked `head` start with these lines, so their errors are on line 6 or later.
constexpr const char* kHead =
    "func f {\n"
    "  param N = 8, K;\n"
    "  input A : f32[N, K];\n"
    "  input p : i32[N + 1];\n"
    "  output y : f32[N];\n";

struct BadInput {
  const char* name;
  bool head;
  const char* text;
  const char* error;  // the whole what(): "file:line:col: stage error: message"
};

// clang-format off
const BadInput kCases[] = {
    {"EmptyFile", false,
     "",
     "bad.kiln:1:1: parse error: expected 'func', found end of file (a .kiln file holds one or more funcs)"},
    {"OnlyComments", false,
     "# nothing here\n// nor here\n",
     "bad.kiln:3:1: parse error: expected 'func', found end of file (a .kiln file holds one or more funcs)"},
    {"UnexpectedCharacter", true,
     "  compute c(i) in 0 <= i < N: y[i] = A[i, 0] @ 2;\n}",
     "bad.kiln:6:46: parse error: unexpected character '@'"},
    {"SingleAmpersand", true,
     "  compute c(i) in 0 <= i < N & i < K: y[i] = 1.0;\n}",
     "bad.kiln:6:30: parse error: unexpected character '&' (did you mean '&&' or 'and'?)"},
    {"SingleQuote", true,
     "  schedule { c.apply_sch('x'); }\n}",
     "bad.kiln:6:26: parse error: unexpected character ''' (strings use double quotes)"},
    {"NonAsciiByte", true,
     "  compute c(i) in 0 <= i < N: y[i] = \xc3""\x83""\xc2""\xa9"";\n}",
     "bad.kiln:6:38: parse error: unexpected byte 0xC3 (outside comments and strings, .kiln source is ASCII)"},
    {"IntegerTooLarge", false,
     "func f {\n  param N = 99999999999999999999;\n}",
     "bad.kiln:2:13: parse error: integer literal '99999999999999999999' is too large (the largest is 9223372036854775807)"},
    {"FloatOutOfRange", true,
     "  compute c(i) in 0 <= i < N: y[i] = 1e999;\n}",
     "bad.kiln:6:38: parse error: float literal '1e999' is out of range"},
    {"DotWithoutDigits", true,
     "  compute c(i) in 0 <= i < N: y[i] = 1.;\n}",
     "bad.kiln:6:38: parse error: expected a digit after '.' in the number '1.'"},
    {"EmptyExponent", true,
     "  compute c(i) in 0 <= i < N: y[i] = 2e+;\n}",
     "bad.kiln:6:38: parse error: expected digits in the exponent of the number '2e+'"},
    {"LettersInNumber", true,
     "  compute c(i) in 0 <= i < N: y[i] = 3x;\n}",
     "bad.kiln:6:38: parse error: invalid number '3x'"},
    {"UnterminatedString", true,
     "  schedule {\n    c.apply_sch(\"{ c[i] -> c[i] };\n  }\n}",
     "bad.kiln:7:17: parse error: unterminated string: a string ends with '\"' on the line it starts"},
    {"UnknownEscape", true,
     "  schedule { c.apply_sch(\"a\\qb\"); }\n}",
     "bad.kiln:6:28: parse error: unknown escape in string: '\\' followed by 'q' (known: \\\" \\\\ \\n \\t)"},
    {"MissingFuncName", false,
     "func {\n}",
     "bad.kiln:1:6: parse error: expected a function name after 'func', found '{'"},
    {"MissingOpenBrace", false,
     "func f\n  param N;\n}",
     "bad.kiln:2:3: parse error: expected '{' after the function name 'f', found 'param'"},
    {"UnclosedFunc", true,
     "  compute c(i) in 0 <= i < N: y[i] = 1.0;\n",
     "bad.kiln:7:1: parse error: expected '}' to close func 'f' (opened at 1:8), found end of file"},
    {"TrailingGarbage", true,
     "}\nfunc",
     "bad.kiln:7:5: parse error: expected a function name after 'func', found end of file"},
    {"NotAnItem", true,
     "  let x = 3;\n}",
     "bad.kiln:6:3: parse error: expected an item (param, constraint, input, output, temp, knob, compute, for, option or schedule), found 'let'"},
    {"ScheduleCommandOutsideSchedule", true,
     "  y.set_loc(stack);\n}",
     "bad.kiln:6:3: parse error: expected an item (schedule commands go inside 'schedule { ... }'), found 'y'"},
    {"ParamNotAName", false,
     "func f {\n  param 3;\n}",
     "bad.kiln:2:9: parse error: expected a param name, found '3'"},
    {"ParamFloatValue", false,
     "func f {\n  param N = 2.5;\n}",
     "bad.kiln:2:13: parse error: expected an integer value for param 'N', found '2.5'"},
    {"ParamMissingComma", false,
     "func f {\n  param N M;\n}",
     "bad.kiln:2:11: parse error: expected '=', ',' or ';' after param 'N', found 'M'"},
    {"UnknownType", false,
     "func f {\n  input A : f16[4];\n}",
     "bad.kiln:2:13: parse error: expected a type (bool, i32, i64, f32 or f64) for buffer 'A', found 'f16'"},
    {"MissingColon", false,
     "func f {\n  input A f32[4];\n}",
     "bad.kiln:2:11: parse error: expected ':' and a type after buffer 'A', found 'f32'"},
    {"MissingShape", false,
     "func f {\n  input A : f32;\n}",
     "bad.kiln:2:16: parse error: expected '[' and the shape of buffer 'A' (use [] for a scalar), found ';'"},
    {"ShapeNotClosed", false,
     "func f {\n  param N;\n  input A : f32[N;\n}",
     "bad.kiln:3:18: parse error: expected ',' or ']' in the shape of buffer 'A', found ';'"},
    {"ValueRangeNotClosed", false,
     "func f {\n  input A : i32[4] in [0, 4;\n}",
     "bad.kiln:2:28: parse error: expected ']' or ')' to end the value range of 'A', found ';'"},
    {"ValueRangeBadOpen", false,
     "func f {\n  input A : i32[4] in {0, 4};\n}",
     "bad.kiln:2:23: parse error: expected '[' or '(' to start the value range of 'A', found '{'"},
    {"MisspelledSorted", false,
     "func f {\n  input A : i32[4] sortd;\n}",
     "bad.kiln:2:20: parse error: expected 'in', 'sorted' or ';' after buffer 'A', found 'sortd'"},
    {"KnobWithoutCandidates", false,
     "func f {\n  knob T = 4;\n}",
     "bad.kiln:2:13: parse error: expected 'in' and a list of candidates after the default of knob 'T', found ';'"},
    {"KnobEmptyCandidates", false,
     "func f {\n  knob T = 4 in [];\n}",
     "bad.kiln:2:18: parse error: expected an integer candidate for knob 'T', found ']'"},
    {"ComputeWithoutParens", true,
     "  compute c i in 0 <= i < N: y[i] = 1.0;\n}",
     "bad.kiln:6:13: parse error: expected '(' and the iterators of 'c' (use () for none), found 'i'"},
    {"IteratorsWithoutComma", true,
     "  compute c(i j) in 0 <= i < N: y[i] = 1.0;\n}",
     "bad.kiln:6:15: parse error: expected ',' or ')' after iterator 'i', found 'j'"},
    {"DomainWithoutIn", true,
     "  compute c(i) 0 <= i < N: y[i] = 1.0;\n}",
     "bad.kiln:6:16: parse error: expected 'in', ':' or '=' after the iterators of 'c', found '0'"},
    {"DomainWithoutColon", true,
     "  compute c(i) in 0 <= i < N y[i] = 1.0;\n}",
     "bad.kiln:6:30: parse error: expected ',', ':' or '=' after a condition of the domain of 'c', found 'y'"},
    {"StoreWithParens", true,
     "  compute c(i) in 0 <= i < N: y(i) = 1.0;\n}",
     "bad.kiln:6:32: parse error: expected '[' and indices after buffer 'y' (a store writes BUF[i, ...] = value), found '('"},
    {"StoreIndicesNotClosed", true,
     "  compute c(i) in 0 <= i < N: y[i = 1.0;\n}",
     "bad.kiln:6:35: parse error: expected ']' after buffer indices, found '='"},
    {"LoadIndicesNotClosed", true,
     "  compute c(i) in 0 <= i < N: y[i] = A[i, 0;\n}",
     "bad.kiln:6:44: parse error: expected ']' after buffer indices, found ';'"},
    {"ChainedBrackets", true,
     "  compute c(i) in 0 <= i < N: y[i] = A[i][0];\n}",
     "bad.kiln:6:42: parse error: a buffer takes all its indices in one pair of brackets: write 'A[i, j]', not 'A[i][j]'"},
    {"EqualsEqualsInStore", true,
     "  compute c(i) in 0 <= i < N: y[i] == 1.0;\n}",
     "bad.kiln:6:36: parse error: expected '=', '+=', '-=' or '*=' after the store target 'y[...]', found '=='"},
    {"MissingSemicolon", true,
     "  compute c(i) in 0 <= i < N: y[i] = 1.0\n}",
     "bad.kiln:7:1: parse error: expected ';' at the end of computation 'c', found '}'"},
    {"UnclosedParen", true,
     "  compute c(i) in 0 <= i < N: y[i] = (1.0 + A[i, 0];\n}",
     "bad.kiln:6:52: parse error: expected ')' to close the '(' at 6:38, found ';'"},
    {"MissingOperand", true,
     "  compute c(i) in 0 <= i < N: y[i] = 1.0 *;\n}",
     "bad.kiln:6:43: parse error: expected an expression, found ';'"},
    {"CallArgumentsNotClosed", true,
     "  compute c(i) in 0 <= i < N: y[i] = exp(A[i, 0];\n}",
     "bad.kiln:6:49: parse error: expected ',' or ')' after an argument of 'exp', found ';'"},
    {"ReductionInsideExpression", true,
     "  compute c(i) in 0 <= i < N:\n    y[i] = 2.0 * sum(k in 0 <= k < K) A[i, k];\n}",
     "bad.kiln:7:18: parse error: a reduction ('sum') is only allowed as the whole right-hand side of a store with '=', as in 'C[i] = sum(k in 0 <= k < K) A[i, k]'"},
    {"ReductionAfterPlusEquals", true,
     "  compute c(i) in 0 <= i < N: y[i] += sum(k in 0 <= k < K) A[i, k];\n}",
     "bad.kiln:6:39: parse error: a reduction ('sum') is only allowed as the whole right-hand side of a store with '=', as in 'C[i] = sum(k in 0 <= k < K) A[i, k]'"},
    {"ReductionInValueComputation", true,
     "  compute c(i) in 0 <= i < N = max(k in 0 <= k < K) A[i, k];\n}",
     "bad.kiln:6:32: parse error: a reduction ('max') is only allowed as the whole right-hand side of a store with '=', as in 'C[i] = sum(k in 0 <= k < K) A[i, k]'"},
    {"ReductionWithoutIn", true,
     "  compute c(i) in 0 <= i < N: y[i] = sum(k) A[i, k];\n}",
     "bad.kiln:6:43: parse error: expected 'in' and a domain after the iterators of reduction 'sum', found ')'"},
    {"ReductionDomainNotClosed", true,
     "  compute c(i) in 0 <= i < N: y[i] = sum(k in 0 <= k < K A[i, k];\n}",
     "bad.kiln:6:58: parse error: expected ',' or ')' after a condition of reduction 'sum', found 'A'"},
    {"ScheduleOpenedNotClosed", true,
     "  schedule {\n    y.set_loc(stack);\n",
     "bad.kiln:8:1: parse error: expected '}' to close the schedule block (opened at 6:12), found end of file"},
    {"ScheduleCommandWithoutDot", true,
     "  schedule { y set_loc(stack); }\n}",
     "bad.kiln:6:16: parse error: expected '.' after 'y' in a schedule command (TARGET.OP(...);), found 'set_loc'"},
    {"ScheduleFloatArgument", true,
     "  schedule { c.split(i, 1.5, io, ii); }\n}",
     "bad.kiln:6:25: parse error: expected a schedule argument (an integer, a name, a string or a [list]), found '1.5'"},
    {"ScheduleCommandWithoutSemicolon", true,
     "  schedule { c.split(i, 4, io, ii) }\n}",
     "bad.kiln:6:36: parse error: expected ';' after 'c.split(...)', found '}'"},
    {"ScheduleListNotClosed", true,
     "  schedule { c.store_at(y, [i, 0); }\n}",
     "bad.kiln:6:33: parse error: expected ',' or ']' in a list, found ')'"},
    {"DuplicateFunc", false,
     "func f {\n}\nfunc f {\n}",
     "bad.kiln:3:6: validate error: duplicate func 'f': already declared at 1:6"},
    {"DuplicateParam", true,
     "  param N;\n}",
     "bad.kiln:6:9: validate error: duplicate name 'N': already declared as a param at 2:9"},
    {"BufferNamedLikeParam", true,
     "  temp K : f32[4];\n}",
     "bad.kiln:6:8: validate error: duplicate name 'K': already declared as a param at 2:16"},
    {"BuiltinAsName", false,
     "func f {\n  param exp;\n}",
     "bad.kiln:2:9: validate error: 'exp' is a built-in function and cannot name a param"},
    {"IteratorNamedLikeParam", true,
     "  compute c(K) in 0 <= K < N: y[K] = 1.0;\n}",
     "bad.kiln:6:13: validate error: iterator 'K' has the name of a param declared at 2:16; iterators may not reuse names"},
    {"IteratorTwice", true,
     "  compute c(i, i) in 0 <= i < N: y[i] = 1.0;\n}",
     "bad.kiln:6:16: validate error: iterator 'i' is declared twice in 'c' (first at 6:13)"},
    {"IteratorNamedRoot", true,
     "  compute c(root) in 0 <= root < N: y[root] = 1.0;\n}",
     "bad.kiln:6:13: validate error: 'root' names the outermost level in schedules and cannot name an iterator"},
    {"ReductionIteratorShadowsOuter", true,
     "  compute c(i) in 0 <= i < N: y[i] = sum(i in 0 <= i < K) A[i, i];\n}",
     "bad.kiln:6:42: validate error: iterator 'i' is declared twice in 'c' (first at 6:13)"},
    {"DuplicateComputation", true,
     "  compute c(i) in 0 <= i < N: y[i] = 1.0;\n  compute c(i) in 0 <= i < N: y[i] = 2.0;\n}",
     "bad.kiln:7:11: validate error: duplicate name 'c': already declared as a computation at 6:11"},
    {"ReductionInitClashes", true,
     "  compute c_init(i) in 0 <= i < N = 1.0;\n  compute c(i) in 0 <= i < N: y[i] = sum(k in 0 <= k < K) A[i, k];\n}",
     "bad.kiln:7:38: validate error: the computation 'c_init' made by the reduction in 'c' clashes with a name: already declared as a computation at 6:11"},
    {"ComputationNamedLikeParam", true,
     "  compute K(i) in 0 <= i < N: y[i] = 1.0;\n}",
     "bad.kiln:6:11: validate error: duplicate name 'K': already declared as a param at 2:16"},
    {"UsedBeforeDeclared", false,
     "func f {\n  output y : f32[N];\n  param N;\n}",
     "bad.kiln:2:18: validate error: unknown name 'N' in the shape of 'y' (it is declared later, at 3:9; names must be declared before they are used)"},
    {"ComputationReadBeforeDeclared", true,
     "  compute c(i) in 0 <= i < N: y[i] = v(i);\n  compute v(i) in 0 <= i < N = 1.0;\n}",
     "bad.kiln:6:38: validate error: unknown function or computation 'v' (it is declared later, at 7:11; names must be declared before they are used)"},
    {"BufferUsedBeforeDeclared", true,
     "  compute c(i) in 0 <= i < N: z[i] = 1.0;\n  output z : f32[N];\n}",
     "bad.kiln:6:31: validate error: unknown buffer 'z' (it is declared later, at 7:10; names must be declared before they are used)"},
    {"UnknownName", true,
     "  compute c(i) in 0 <= i < Nn: y[i] = 1.0;\n}",
     "bad.kiln:6:28: validate error: unknown name 'Nn' in the domain of 'c' (did you mean 'N'?)"},
    {"UnknownBuffer", true,
     "  compute c(i) in 0 <= i < N: y[i] = B[i];\n}",
     "bad.kiln:6:38: validate error: unknown buffer 'B'"},
    {"UnknownStoreBuffer", true,
     "  compute c(i) in 0 <= i < N: yy[i] = 1.0;\n}",
     "bad.kiln:6:31: validate error: unknown buffer 'yy' (did you mean 'y'?)"},
    {"UnknownFunction", true,
     "  compute c(i) in 0 <= i < N: y[i] = expp(A[i, 0]);\n}",
     "bad.kiln:6:38: validate error: unknown function or computation 'expp'"},
    {"ParamIndexed", true,
     "  compute c(i) in 0 <= i < N: y[i] = K[i];\n}",
     "bad.kiln:6:38: validate error: 'K' is a param, not a buffer"},
    {"BufferWithoutIndices", true,
     "  compute c(i) in 0 <= i < N: y[i] = y;\n}",
     "bad.kiln:6:38: validate error: buffer 'y' is read with indices: 'y[...]'"},
    {"BufferReadWithParens", true,
     "  compute c(i) in 0 <= i < N: y[i] = A(i, 0);\n}",
     "bad.kiln:6:38: validate error: 'A' is a buffer; read it with brackets: 'A[...]'"},
    {"KnobInExpression", true,
     "  knob T = 4 in [4, 8];\n  compute c(i) in 0 <= i < T: y[i] = 1.0;\n}",
     "bad.kiln:7:28: validate error: knob 'T' can only be used in schedule commands and constraints"},
    {"ComputationReadsItself", true,
     "  compute c(i) in 0 <= i < N = c(i - 1);\n}",
     "bad.kiln:6:32: validate error: computation 'c' cannot read itself"},
    {"ReadOfStoringComputation", true,
     "  compute c(i) in 0 <= i < N: y[i] = 1.0;\n  compute d(i) in 0 <= i < N: y[i] = c(i);\n}",
     "bad.kiln:7:38: validate error: computation 'c' stores to a buffer and has no value to read; read the buffer it stores to"},
    {"UnknownScheduleTarget", true,
     "  compute c(i) in 0 <= i < N: y[i] = 1.0;\n  schedule {\n    d.split(i, 4, io, ii);\n  }\n}",
     "bad.kiln:8:5: validate error: schedule command 'd.split' names 'd', which is neither a computation nor a buffer of 'f'"},
    {"SecondSchedule", true,
     "  schedule { }\n  schedule { }\n}",
     "bad.kiln:7:3: validate error: func 'f' has a second schedule block (the first is at 6:3); a func has at most one"},
    {"DuplicateKnob", true,
     "  knob T = 4 in [4];\n  schedule { knob T = 8 in [8]; }\n}",
     "bad.kiln:7:19: validate error: duplicate name 'T': already declared as a knob at 6:8"},
    {"WrongRank", true,
     "  compute c(i) in 0 <= i < N: y[i] = A[i];\n}",
     "bad.kiln:6:38: validate error: buffer 'A' has 2 dimensions but is read with 1 index"},
    {"WrongStoreRank", true,
     "  compute c(i) in 0 <= i < N: y[i, 0] = 1.0;\n}",
     "bad.kiln:6:31: validate error: buffer 'y' has 1 dimension but the store gives 2 indices"},
    {"WrongComputationArity", true,
     "  compute v(i) in 0 <= i < N = 1.0;\n  compute c(i) in 0 <= i < N: y[i] = v(i, 0);\n}",
     "bad.kiln:7:38: validate error: computation 'v' has 1 iterator but is read with 2 indices"},
    {"StoreToInput", true,
     "  compute c(i) in 0 <= i < N: p[i] = 1;\n}",
     "bad.kiln:6:31: validate error: cannot store to 'p': it is an input buffer (only output and temp buffers are written)"},
    {"StoreWrongType", true,
     "  compute c(i) in 0 <= i < N: y[i] = i;\n}",
     "bad.kiln:6:38: validate error: the value stored to 'y' must be f32, found i64; cast it: f32(...)"},
    {"StoreF64IntoF32", false,
     "func f {\n  input d : f64[4];\n  output y : f32[4];\n  compute c(i) in 0 <= i < 4: y[i] = d[i];\n}",
     "bad.kiln:4:38: validate error: the value stored to 'y' must be f32, found f64; cast it: f32(...)"},
    {"StoreI32IntoI64", false,
     "func f {\n  input s : i32[4];\n  output y : i64[4];\n  compute c(i) in 0 <= i < 4: y[i] = s[i];\n}",
     "bad.kiln:4:38: validate error: the value stored to 'y' must be i64, found i32; cast it: i64(...)"},
    {"IntFloatMix", true,
     "  compute c(i) in 0 <= i < N: y[i] = A[i, 0] * i;\n}",
     "bad.kiln:6:46: validate error: operands of '*' do not mix: f32 and i64; cast the integer side: f32(...)"},
    {"FloatConstantWithInt", true,
     "  compute c(i) in 0 <= i < N: y[i] = f32(i * 0.5);\n}",
     "bad.kiln:6:44: validate error: operands of '*' do not mix: i64 and the float constant '0.5'; cast the integer side: f32(...)"},
    {"F32F64Mix", false,
     "func f {\n  input d : f64[4];\n  output y : f32[4];\n  compute c(i) in 0 <= i < 4: y[i] = f32(d[i] + 1.0) + d[i];\n}",
     "bad.kiln:4:54: validate error: operands of '+' do not mix: f32 and f64; cast one side: f32(...) or f64(...)"},
    {"FloatIndex", true,
     "  compute c(i) in 0 <= i < N: y[i] = A[i, 0.5];\n}",
     "bad.kiln:6:43: validate error: index 2 of 'A' must be an integer, found the float constant '0.5'"},
    {"FloatTypedIndex", true,
     "  compute c(i) in 0 <= i < N: y[i] = A[i, i32(A[0, 0])] + A[i, A[0, 0]];\n}",
     "bad.kiln:6:64: validate error: index 2 of 'A' must be an integer, found f32"},
    {"NonBoolCondition", true,
     "  compute c(i) in 0 <= i < N, i: y[i] = 1.0;\n}",
     "bad.kiln:6:31: validate error: a condition of the domain of 'c' must be bool, found i64"},
    {"NonBoolSelect", true,
     "  compute c(i) in 0 <= i < N: y[i] = select(i, 1.0, 0.0);\n}",
     "bad.kiln:6:45: validate error: the condition of 'select' must be bool, found i64"},
    {"ArithmeticOnBool", true,
     "  compute c(i) in 0 <= i < N: y[i] = f32((i < 2) + 1);\n}",
     "bad.kiln:6:50: validate error: operands of '+' must be numbers, found bool"},
    {"NotOnNumber", true,
     "  compute c(i) in 0 <= i < N: y[i] = select(not i, 1.0, 0.0);\n}",
     "bad.kiln:6:49: validate error: the operand of 'not' must be bool, found i64"},
    {"MathOnInteger", true,
     "  compute c(i) in 0 <= i < N: y[i] = exp(i);\n}",
     "bad.kiln:6:42: validate error: 'exp' needs a float argument, found i64; cast it: f32(...)"},
    {"WrongArity", true,
     "  compute c(i) in 0 <= i < N: y[i] = pow(A[i, 0]);\n}",
     "bad.kiln:6:38: validate error: 'pow' takes 2 arguments, found 1"},
    {"ConstantDoesNotFit", false,
     "func f {\n  output y : i32[4];\n  compute c(i) in 0 <= i < 4: y[i] = 3000000000;\n}",
     "bad.kiln:3:38: validate error: the constant '3000000000' does not fit in i32"},
    {"ConstantOverflow", true,
     "  compute c(i) in 0 <= i < N: y[i] = f32(9223372036854775807 + 1);\n}",
     "bad.kiln:6:62: validate error: constant expression '9223372036854775807 + 1' overflows 64-bit integers"},
    {"ConstantDivisionByZero", true,
     "  compute c(i) in 0 <= i < N: y[i] = f32(i / (2 - 2));\n}",
     "bad.kiln:6:44: validate error: division by zero in 'i / (2 - 2)'"},
    {"PlusEqualsOnBool", false,
     "func f {\n  output m : bool[4];\n  compute c(i) in 0 <= i < 4: m[i] += true;\n}",
     "bad.kiln:3:36: validate error: '+=' needs a numeric buffer; 'm' is bool"},
    {"ReductionIntoBool", false,
     "func f {\n  output m : bool[4];\n  compute c(i) in 0 <= i < 4: m[i] = max(k in 0 <= k < 4) true;\n}",
     "bad.kiln:3:38: validate error: reduction 'max' needs a numeric buffer; 'm' is bool"},
    {"ProductOfIterators", true,
     "  compute c(i, j) in 0 <= i < N, 0 <= j < N, i * j < N: y[i] = 1.0;\n}",
     "bad.kiln:6:48: validate error: 'i * j' is not affine: one factor of a product in the domain of 'c' must be an integer constant"},
    {"ProductOfParams", true,
     "  constraint N * K > 4;\n}",
     "bad.kiln:6:16: validate error: 'N * K' is not affine: one factor of a product in a constraint must be an integer constant"},
    {"DivisionByParam", true,
     "  compute c(i) in 0 <= i < N / K: y[i] = 1.0;\n}",
     "bad.kiln:6:30: validate error: 'N / K' is not affine: the divisor in the domain of 'c' must be a positive integer constant"},
    {"NonAffineCall", true,
     "  compute c(i) in 0 <= i < min(N, K): y[i] = 1.0;\n}",
     "bad.kiln:6:28: validate error: 'min(N, K)' is not affine: the domain of 'c' may only use sums of terms c*x, x/c and x%c (x an iterator or param, c an integer constant)"},
    {"NoUpperBound", true,
     "  compute c(i) in 0 <= i: y[i] = 1.0;\n}",
     "bad.kiln:6:13: validate error: iterator 'i' of 'c' has no upper bound; add a condition such as 'i < N' to its domain"},
    {"NoLowerBound", true,
     "  compute c(i, j) in i < N, 0 <= j < N: y[i] = 1.0;\n}",
     "bad.kiln:6:13: validate error: iterator 'i' of 'c' has no lower bound; add a condition such as '0 <= i' to its domain"},
    {"BoundOnlyInsideOr", true,
     "  compute c(i) in 0 <= i, i < 4 or i < N: y[i] = 1.0;\n}",
     "bad.kiln:6:13: validate error: iterator 'i' of 'c' has no upper bound; add a condition such as 'i < N' to its domain"},
    {"ReductionIteratorUnbounded", true,
     "  compute c(i) in 0 <= i < N: y[i] = sum(k in 0 <= k) A[i, k];\n}",
     "bad.kiln:6:42: validate error: iterator 'k' of 'c' has no upper bound; add a condition such as 'k < N' to its domain"},
    {"DataDependentBoundOnItself", true,
     "  compute c(i) in 0 <= i < N, i < p[i]: y[i] = 1.0;\n}",
     "bad.kiln:6:35: validate error: the data-dependent bound 'p[i]' on 'i' reads at iterator 'i': a buffer read in a domain may only use iterators declared before the one it bounds"},
    {"DataDependentBoundOnLaterIterator", true,
     "  compute c(i, j) in 0 <= j < N, p[j] <= i < N: y[i] = 1.0;\n}",
     "bad.kiln:6:34: validate error: the data-dependent bound 'p[j]' on 'i' reads at iterator 'j': a buffer read in a domain may only use iterators declared before the one it bounds"},
    {"ReadThatBoundsNothing", true,
     "  compute c(i) in 0 <= i < N, p[i] > 0: y[i] = 1.0;\n}",
     "bad.kiln:6:31: validate error: the buffer read 'p[i]' in the domain of 'c' bounds no iterator: a domain may read a buffer only to bound an iterator declared after those it reads at (for a data-dependent test, use select in the value)"},
    {"DomainReadsOutput", true,
     "  compute c(i, j) in 0 <= i < N, 0 <= j < y[i]: y[i] = 1.0;\n}",
     "bad.kiln:6:43: validate error: the domain of 'c' may only read input buffers; 'y' is an output buffer"},
    {"ConditionNotComparison", false,
     "func f {\n  input m : bool[4];\n  output y : f32[4];\n  compute c(i) in 0 <= i < 4, m[i]: y[i] = 1.0;\n}",
     "bad.kiln:4:31: validate error: a condition in the domain of 'c' must be a comparison such as '0 <= i < N', found 'm[i]'"},
    {"StoreIndexNotAffine", true,
     "  compute c(i) in 0 <= i < N: y[p[i] * p[i]] = 1.0;\n}",
     "bad.kiln:6:38: validate error: 'p[i] * p[i]' is not affine: one factor of a product in the indices of the store to 'y' must be an integer constant"},
    {"ComputationReadIndexNotAffine", true,
     "  compute v(i) in 0 <= i < N = 1.0;\n  compute c(i) in 0 <= i < N: y[i] = v(i * i);\n}",
     "bad.kiln:7:42: validate error: 'i * i' is not affine: one factor of a product in the indices of a read of 'v' must be an integer constant"},
    {"ConstraintReadsBuffer", true,
     "  constraint p[0] > 1;\n}",
     "bad.kiln:6:14: validate error: a buffer read ('p[0]') is not allowed in a constraint"},
    {"ConstraintNotBool", true,
     "  constraint N + 1;\n}",
     "bad.kiln:6:14: validate error: a constraint must be bool, found i64"},
    {"ConstraintUsesUnknownName", true,
     "  constraint i > 1;\n}",
     "bad.kiln:6:14: validate error: unknown name 'i' in a constraint"},
    {"ShapeNotAffine", false,
     "func f {\n  param N;\n  input A : f32[N * N];\n}",
     "bad.kiln:3:19: validate error: 'N * N' is not affine: one factor of a product in the shape of 'A' must be an integer constant"},
    {"ShapeNotPositive", false,
     "func f {\n  input A : f32[4, 2 - 2];\n}",
     "bad.kiln:2:20: validate error: extent 2 of buffer 'A' must be positive, found 0"},
    {"ShapeFloat", false,
     "func f {\n  input A : f32[2.5];\n}",
     "bad.kiln:2:17: validate error: extent 1 of buffer 'A' must be an integer, found the float constant '2.5'"},
    {"ValueRangeOnOutput", false,
     "func f {\n  output y : f32[4] in [0, 1];\n}",
     "bad.kiln:2:24: validate error: a value range is only allowed on input buffers; 'y' is an output"},
    {"SortedOnTemp", false,
     "func f {\n  temp t : i32[4] sorted;\n}",
     "bad.kiln:2:19: validate error: 'sorted' is only allowed on input buffers; 't' is a temp"},
    {"EmptyValueRange", false,
     "func f {\n  input A : i32[4] in [3, 3);\n}",
     "bad.kiln:2:23: validate error: the value range of 'A' is empty"},
    {"ValueRangeOnBool", false,
     "func f {\n  input m : bool[4] in [0, 1];\n}",
     "bad.kiln:2:24: validate error: bool buffer 'm' cannot have a value range"},
    {"ValueRangeUnknownName", false,
     "func f {\n  input A : i32[4] in [0, n];\n}",
     "bad.kiln:2:27: validate error: unknown name 'n' in the value range of 'A'"},
    {"KnobDefaultNotCandidate", false,
     "func f {\n  knob T = 3 in [1, 2, 4];\n}",
     "bad.kiln:2:12: validate error: the default 3 of knob 'T' is not one of its candidates [1, 2, 4]"},
    {"KnobDuplicateCandidate", false,
     "func f {\n  knob T = 2 in [1, 2, 2];\n}",
     "bad.kiln:2:24: validate error: knob 'T' lists the candidate 2 twice"},
};
// clang-format on

std::string what_of(const std::string& text) {
  try {
    frontend::parse_module(text, "bad.kiln");
  } catch (const CompileError& e) {
    return e.what();
  }
  return "(no error)";
}

class ParserErrors : public ::testing::TestWithParam<BadInput> {};

TEST_P(ParserErrors, ExactMessage) {
  const BadInput& c = GetParam();
  std::string text = c.head ? std::string(kHead) + c.text : std::string(c.text);
  EXPECT_EQ(what_of(text), c.error) << "input:\n" << text;
}

INSTANTIATE_TEST_SUITE_P(Table, ParserErrors, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(ParserErrors, StageAndLocationAreStructured) {
  try {
    frontend::parse_module(std::string(kHead) + "  compute c(i) in 0 <= i < N: y[i] = A[i;\n}",
                           "matmul.kiln");
    FAIL();
  } catch (const CompileError& e) {
    EXPECT_EQ(e.stage(), ErrorStage::Parse);
    EXPECT_EQ(e.loc().file, "matmul.kiln");
    EXPECT_EQ(e.loc().line, 6);
    EXPECT_EQ(e.loc().col, 41);
    EXPECT_EQ(e.message(), "expected ']' after buffer indices, found ';'");
  }
  try {
    frontend::parse_module(std::string(kHead) + "  compute c(i) in 0 <= i < N: y[i] = i;\n}");
    FAIL();
  } catch (const CompileError& e) {
    EXPECT_EQ(e.stage(), ErrorStage::Validate);
    EXPECT_EQ(e.loc().file, "<input>");
    EXPECT_EQ(e.loc().str(), "<input>:6:38");
  }
}

// Nesting deeper than 256 levels is refused with a message, not a crash.
TEST(ParserErrors, NestingLimit) {
  std::string head = std::string(kHead) + "  compute c(i) in 0 <= i < N: y[i] = ";
  std::string parens = head + std::string(300, '(') + "1.0" + std::string(300, ')') + ";\n}";
  std::string negs = head + std::string(300, '-') + "1.0;\n}";
  std::string chain = head + "1.0";
  for (int k = 0; k < 300; ++k) chain += " + 1.0";
  chain += ";\n}";
  std::string comparisons = head + "select(0";
  for (int k = 0; k < 300; ++k) comparisons += " < 1";
  comparisons += ", 1.0, 0.0);\n}";
  std::string lists = std::string(kHead) + "  schedule { c.f(" + std::string(300, '[') +
                      std::string(300, ']') + "); }\n}";
  EXPECT_EQ(
      what_of(parens),
      "bad.kiln:6:294: parse error: expression is nested too deeply (the limit is 256 levels)");
  EXPECT_EQ(
      what_of(negs),
      "bad.kiln:6:293: parse error: expression is nested too deeply (the limit is 256 levels)");
  EXPECT_EQ(
      what_of(chain),
      "bad.kiln:6:1572: parse error: expression is nested too deeply (the limit is 256 levels)");
  EXPECT_EQ(
      what_of(comparisons),
      "bad.kiln:6:47: parse error: expression is nested too deeply (the limit is 256 levels)");
  EXPECT_EQ(
      what_of(lists),
      "bad.kiln:6:274: parse error: expression is nested too deeply (the limit is 256 levels)");
  // Just under the limit is fine.
  std::string ok = head + std::string(200, '(') + "1.0" + std::string(200, ')') + ";\n}";
  EXPECT_EQ(what_of(ok), "(no error)");
  std::string long_ok = head + "1.0";
  for (int k = 0; k < 200; ++k) long_ok += " + 1.0";
  EXPECT_EQ(what_of(long_ok + ";\n}"), "(no error)");
}

}  // namespace
}  // namespace kiln
