#include "generator/native_f16.h"

#include <llvm-c/BitWriter.h>
#include <llvm-c/Core.h>
#include <llvm-c/IRReader.h>

#include <cstdint>
#include <vector>

#include "schedules/target_info.h"

namespace attngen {

namespace {

constexpr char kName[] = "attngen_f16_to_f32";
constexpr char kCodeName[] = "org.attngen.f16_to_f32";

// The scalar function and its vector forms (Halide looks for <name>x<lanes> at the lanes of a
// call, or the next power of two, and splits or pads to it): the bits as half, extended to f32.
// weak_odr and hidden: every kernel object that reads f16 carries a copy, and a program that
// links many keeps one. alwaysinline: a call costs more than the instruction it wraps.
std::string ir_text(const Halide::Target& target) {
  // LLVM's data layout for the kernel's architecture (as the kernel module has it, so LLVM's
  // linker does not warn of a mismatch); the symbol mangling is the object format's.
  const char mangling =
      target.os == Halide::Target::Windows
          ? 'w'
          : (target.os == Halide::Target::OSX || target.os == Halide::Target::IOS ? 'o' : 'e');
  const char* layout = target.arch == Halide::Target::ARM && target.bits == 64
                           ? "-i8:8:32-i16:16:32-i64:64-i128:128-n32:64-S128"
                           : "-p270:32:32-p271:32:32-p272:64:64-i64:64-f80:128-n8:16:32:64-S128";
  std::string ir = std::string("target datalayout = \"e-m:") + mangling + layout + "\"\n";
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

// The IR as bitcode, by LLVM's C API (the LLVM that Halide itself links).
std::vector<uint8_t> bitcode(const std::string& ir) {
  LLVMContextRef context = LLVMContextCreate();
  // LLVMParseIRInContext takes the buffer's ownership.
  LLVMMemoryBufferRef text =
      LLVMCreateMemoryBufferWithMemoryRangeCopy(ir.data(), ir.size(), "attngen_f16");
  LLVMModuleRef module = nullptr;
  char* message = nullptr;
  if (LLVMParseIRInContext(context, text, &module, &message)) {
    const std::string why = message != nullptr ? message : "";
    LLVMDisposeMessage(message);
    LLVMContextDispose(context);
    throw Halide::CompileError("attngen: the f16 widening's IR does not parse: " + why);
  }
  LLVMMemoryBufferRef code = LLVMWriteBitcodeToMemoryBuffer(module);
  const auto* start = reinterpret_cast<const uint8_t*>(LLVMGetBufferStart(code));
  std::vector<uint8_t> bytes(start, start + LLVMGetBufferSize(code));
  LLVMDisposeMemoryBuffer(code);
  LLVMDisposeModule(module);
  LLVMContextDispose(context);
  return bytes;
}

}  // namespace

bool widens_f16_natively(const Halide::Target& target) {
  // The table decides (row_widens_f16); on x86 the feature guards a target that names fewer
  // features than its row (LLVM without F16C would call a library routine per element).
  return row_widens_f16(target_row(target_info(target).isa)) != nullptr &&
         (target.arch != Halide::Target::X86 || target.has_feature(Halide::Target::F16C));
}

Halide::Expr widen_f16_native(const Halide::Expr& x) {
  using Halide::Internal::Call;
  return Call::make(Halide::Float(32, x.type().lanes()), kName,
                    {Halide::reinterpret(Halide::UInt(16, x.type().lanes()), x)}, Call::PureExtern);
}

bool use_native_f16(const std::shared_ptr<std::map<std::string, Halide::ExternalCode>>& externs,
                    const Halide::Target& target, bool reads_f16) {
  if (!reads_f16 || !widens_f16_natively(target)) return false;
  if (externs->count(kCodeName) == 0) {
    externs->emplace(kCodeName, Halide::ExternalCode::bitcode_wrapper(
                                    target, bitcode(ir_text(target)), kCodeName));
  }
  return true;
}

}  // namespace attngen
