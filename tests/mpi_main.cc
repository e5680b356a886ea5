// mpi_main.cc — main() for GoogleTest binaries that run under mpiexec.
//
// Every rank runs every test; a test fails on any rank fails the job, and
// rank 0 alone prints and writes the XML report; the other ranks print only
// their failures, each marked with the rank. Communicators return errors
// instead of aborting (MPI_ERRORS_RETURN), as trellis's own groups do.
// Under ASan each rank checks for leaks before MPI_Finalize, whose network
// modules leak on their way out (tests/mpi_run.sh turns the check at exit
// off); a leak fails the job.
#include <gtest/gtest.h>
#include <mpi.h>
#include <stdlib.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

namespace {

// A rank other than 0: each failed assertion, to stderr, with the rank.
class FailurePrinter : public testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const testing::TestPartResult& r) override {
    if (!r.failed()) return;
    fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_, r.file_name() ? r.file_name() : "?",
            r.line_number(), r.message());
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) {  // one report and one exit marker per job, from rank 0
    unsetenv("XML_OUTPUT_FILE");
    unsetenv("TEST_PREMATURE_EXIT_FILE");
  }
  testing::InitGoogleTest(&argc, argv);
  if (rank != 0) {
    auto& listeners = testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter(rank));
  }
  int failed = RUN_ALL_TESTS() != 0, any_failed = 0;
#if defined(__SANITIZE_ADDRESS__)
  if (__lsan_do_recoverable_leak_check()) {
    fprintf(stderr, "[rank %d] LeakSanitizer found memory nothing points to (above)\n", rank);
    failed = 1;
  }
#endif
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0 && any_failed && !failed) fprintf(stderr, "a test failed on another rank\n");
  MPI_Finalize();
  return any_failed;
}
