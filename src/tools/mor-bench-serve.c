/* mor-bench-serve - the same as `mor-bench --serve` (src/tools/bench_serve.h):
 * serving throughput four ways on a SmolLM-135M-shaped MoR. */
#include "tools/bench_serve.h"
#include "tools/cli.h"

int main(int argc, char **argv)
{
    cli_init("mor-bench-serve");
    return bench_serve_main(argc, argv);
}
