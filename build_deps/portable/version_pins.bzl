"""version_pins: makes the library import chosen symbols at older versions.

For each entry of a pins table (pins.bzl) the link gets `--wrap=SYMBOL`, which
sends every undefined reference to SYMBOL (in our objects and in any static
archive linked in) to `__wrap_SYMBOL`, and this rule writes
`__wrap_SYMBOL` as a one-instruction hidden trampoline, `jmp TARGET@VERSION`
(bound with `.symver`). A tail jump keeps every argument and return value as
they are, whatever the function's signature.

The link must use GNU ld (BFD): gold applies --wrap to the versioned
reference inside the trampoline too, which makes each trampoline jump to
itself. tests/packaging/test_portability.py checks that every trampoline in the built
library reaches its pinned import.
"""

def _trampolines_impl(ctx):
    lines = [
        "# Written by build_deps/portable/version_pins.bzl from build_deps/portable/pins.bzl.",
    ]
    for symbol, target in sorted(ctx.attr.pins.items()):
        target_name, _, version = target.partition("@")
        if not target_name or not version:
            fail("pin %s -> %s: write the target as NAME@VERSION." % (symbol, target))
        wrapper = "__wrap_" + symbol
        reference = "tfo_pinned_" + symbol
        lines.extend([
            # One section per trampoline: --gc-sections drops the unused ones,
            # and their imports with them.
            '.section .text.%s,"ax",@progbits' % wrapper,
            ".symver %s, %s@%s" % (reference, target_name, version),
            ".globl " + wrapper,
            ".hidden " + wrapper,
            ".type %s, @function" % wrapper,
            wrapper + ":",
            "  jmp %s@PLT" % reference,
            ".size %s, .-%s" % (wrapper, wrapper),
        ])
    lines.append('.section .note.GNU-stack,"",@progbits')  # no executable stack
    out = ctx.actions.declare_file(ctx.label.name + ".s")
    ctx.actions.write(out, "\n".join(lines) + "\n")
    return [DefaultInfo(files = depset([out]))]

_trampolines = rule(
    implementation = _trampolines_impl,
    attrs = {"pins": attr.string_dict(mandatory = True)},
    doc = "x86-64 assembly: one __wrap_SYMBOL trampoline per pin.",
)

def version_pins(name, pins, linkopts = [], **kwargs):
    """A cc_library whose link imports each pinned symbol at its pinned version.

    Args:
      name: the cc_library; depend on it from the cc_binary.
      pins: {symbol: "target@VERSION"}.
      linkopts: more link flags for the binary.
      **kwargs: passed to the cc_library.
    """
    _trampolines(name = name + "_trampolines", pins = pins)
    native.cc_library(
        name = name,
        srcs = [":%s_trampolines" % name],
        linkopts = ["-fuse-ld=bfd"] + ["-Wl,--wrap=" + s for s in sorted(pins)] + linkopts,
        # Nothing references __wrap_* before --wrap rewrites the references.
        alwayslink = 1,
        **kwargs
    )
