#include "generator/native_code.h"

#include <llvm-c/BitWriter.h>
#include <llvm-c/Core.h>
#include <llvm-c/IRReader.h>

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

namespace attngen {

namespace {

// LLVM's data layout for the kernel's architecture (as the kernel module has it, so LLVM's
// linker does not warn of a mismatch); the symbol mangling is the object format's.
std::string data_layout(const Halide::Target& target) {
  const char mangling =
      target.os == Halide::Target::Windows
          ? 'w'
          : (target.os == Halide::Target::OSX || target.os == Halide::Target::IOS ? 'o' : 'e');
  const char* layout = target.arch == Halide::Target::ARM && target.bits == 64
                           ? "-i8:8:32-i16:16:32-i64:64-i128:128-n32:64-S128"
                           : "-p270:32:32-p271:32:32-p272:64:64-i64:64-f80:128-n8:16:32:64-S128";
  return std::string("target datalayout = \"e-m:") + mangling + layout + "\"\n";
}

// The IR as bitcode, by LLVM's C API (the LLVM that Halide itself links).
std::vector<uint8_t> bitcode(const std::string& ir, const std::string& code_name) {
  LLVMContextRef context = LLVMContextCreate();
  // LLVMParseIRInContext takes the buffer's ownership.
  LLVMMemoryBufferRef text =
      LLVMCreateMemoryBufferWithMemoryRangeCopy(ir.data(), ir.size(), code_name.c_str());
  LLVMModuleRef module = nullptr;
  char* message = nullptr;
  if (LLVMParseIRInContext(context, text, &module, &message)) {
    const std::string why = message != nullptr ? message : "";
    LLVMDisposeMessage(message);
    LLVMContextDispose(context);
    throw Halide::CompileError("attngen: the IR of " + code_name + " does not parse: " + why);
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

void add_native_code(const ExternsMap& externs, const Halide::Target& target,
                     const std::string& code_name, const std::string& ir) {
  if (externs->count(code_name) != 0) return;
  externs->emplace(code_name, Halide::ExternalCode::bitcode_wrapper(
                                  target, bitcode(data_layout(target) + ir, code_name), code_name));
}

void add_amx_tile_zero(const ExternsMap& externs, const Halide::Target& target) {
  // The vector form Halide's code generation looks for (<name>x256); no readnone, so that each
  // call stays a tilezero of its own.
  const std::string name = std::string(kAmxTileZeroF32) + "x256";
  add_native_code(externs, target, "org.attngen.amx_tile_zero",
                  "define weak_odr hidden <256 x float> @" + name +
                      "(i16 %rows, i16 %colbytes) #0 {\n"
                      "  %t = call x86_amx @llvm.x86.tilezero.internal(i16 %rows, i16 %colbytes)\n"
                      "  %v = bitcast x86_amx %t to <256 x float>\n"
                      "  ret <256 x float> %v\n}\n"
                      "declare x86_amx @llvm.x86.tilezero.internal(i16, i16)\n"
                      "attributes #0 = { alwaysinline nounwind }\n");
}

void add_prefetch_l2(const ExternsMap& externs, const Halide::Target& target) {
  add_native_code(externs, target, "org.attngen.prefetch_l2",
                  std::string("define weak_odr hidden i32 @") + kPrefetchL2 +
                      "(i8* %base, i64 %offset) #0 {\n"
                      "  %p = getelementptr i8, i8* %base, i64 %offset\n"
                      "  call void @llvm.prefetch.p0i8(i8* %p, i32 0, i32 2, i32 1)\n"
                      "  ret i32 0\n}\n"
                      "declare void @llvm.prefetch.p0i8(i8*, i32, i32, i32)\n"
                      "attributes #0 = { alwaysinline nounwind }\n");
}

std::string ir_float(float value) {
  const double d = value;
  uint64_t bits = 0;
  std::memcpy(&bits, &d, sizeof bits);
  char text[24];
  std::snprintf(text, sizeof text, "0x%016" PRIX64, bits);
  return text;
}

}  // namespace attngen
