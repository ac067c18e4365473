#include "generator/native_f16.h"

#include "generator/native_code.h"

namespace attngen {

namespace {

constexpr char kName[] = "attngen_f16_to_f32";
constexpr char kCodeName[] = "org.attngen.f16_to_f32";

// The scalar function and its vector forms (Halide looks for <name>x<lanes> at the lanes of a
// call, or the next power of two, and splits or pads to it): the bits as half, extended to f32.
// weak_odr and hidden: every kernel object that reads f16 carries a copy, and a program that
// links many keeps one. alwaysinline: a call costs more than the instruction it wraps.
std::string ir_text() {
  std::string ir;
  const auto define = [&](const std::string& suffix, const std::string& half,
                          const std::string& bits, const std::string& f32) {
    ir += "define weak_odr hidden " + f32 + " @" + kName + suffix + "(" + bits + " %x) #0 {\n" +
          "  %h = bitcast " + bits + " %x to " + half + "\n" + "  %f = fpext " + half + " %h to " +
          f32 + "\n" + "  ret " + f32 + " %f\n}\n";
  };
  define("", "half", "i16", "float");
  for (int lanes : {4, 8, 16, 32}) {
    const std::string n = "<" + std::to_string(lanes) + " x ";
    define("x" + std::to_string(lanes), n + "half>", n + "i16>", n + "float>");
  }
  ir += "attributes #0 = { alwaysinline nounwind readnone }\n";
  return ir;
}

}  // namespace

bool widens_f16_natively(const Halide::Target& target, const TargetRow& row) {
  // The table decides (row_widens_f16); on x86 the feature guards a target that names fewer
  // features than its row (LLVM without F16C would call a library routine per element).
  return row_widens_f16(row) != nullptr &&
         (target.arch != Halide::Target::X86 || target.has_feature(Halide::Target::F16C));
}

Halide::Expr widen_f16_native(const Halide::Expr& x) {
  using Halide::Internal::Call;
  return Call::make(Halide::Float(32, x.type().lanes()), kName,
                    {Halide::reinterpret(Halide::UInt(16, x.type().lanes()), x)}, Call::PureExtern);
}

bool use_native_f16(const ExternsMap& externs, const Halide::Target& target, const TargetRow& row,
                    bool reads_f16) {
  if (!reads_f16 || !widens_f16_natively(target, row)) return false;
  add_native_code(externs, target, kCodeName, ir_text());
  return true;
}

}  // namespace attngen
