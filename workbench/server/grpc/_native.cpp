// The native gRPC front end's transport: gRPC's C++ server (the library Triton's own front end
// is built on), with every RPC handled as raw bytes by Python.
//
// Why: grpcio's Python server (grpc.aio) spends 300-770 us of CPU per call on this machine,
// more than the whole HTTP path (benchmarks/README.md, "grpc_cpu.py"). Here gRPC's own threads
// do HTTP/2, and Python sees one event per call: the method, its metadata and its message.
//
// How the two sides meet (workbench/server/grpc/native.py is the Python side):
// - One AsyncGenericService takes every RPC, and one thread of ours runs the completion queue
//   (it polls the sockets and reacts to every completed operation). A unary method's message
//   is read before Python hears of the call, so a unary call is one CALL event; a streaming
//   call is announced at once and its messages follow as MESSAGE events, then HALF_CLOSE.
// - Events wait in one queue under a mutex; an eventfd wakes the event loop when the queue
//   stops being empty, and the loop takes the whole queue at once (`drain`). No thread of
//   gRPC's or ours ever takes the GIL (see `HeldBuffer`).
// - Python's answers (`write`: a stream's response; `finish`: the status, with a unary call's
//   reply) go to a sender thread of ours, which starts the gRPC operations under the call's
//   lock. Measured alternatives: starting them on the event loop's thread cost it ~70 us per
//   reply at concurrency 1 and ~120 us at 8 (the event loop's thread is what limits
//   throughput); waking the queue's thread with an alarm cost the loop ~25 us for the alarm
//   alone. A call's writes go out one at a time, in order; a finish waits for them. A
//   cancelled call is finished here, so a call always ends, whatever Python does.
// - A unary request to the `share_method` of `share_from` bytes or more is copied by the
//   queue's thread into an anonymous memfd, which Python maps and a Python model's stub can
//   map too (workbench/shared_buffers.py): from then on, one copy of the tensor in memory.

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <absl/synchronization/mutex.h>
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>
#include <pthread.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

namespace {

enum Kind { CALL = 0, MESSAGE = 1, HALF_CLOSE = 2, WRITE_DONE = 3, CANCEL = 4, DONE = 5 };

// Below this a reply is copied into gRPC's slice; from it the slice lends the Python object.
constexpr size_t kLendFrom = 64 * 1024;

struct Event {
  Event(int kind, uint64_t id) : kind(kind), id(id) {}
  int kind;
  uint64_t id;
  std::string method;
  std::vector<std::pair<std::string, std::string>> metadata;
  bool has_message = false;
  grpc::ByteBuffer message;
  int shared_fd = -1;
  size_t shared_size = 0;
  bool ok = false;
};

class Call;
struct HeldBuffer;

// Where gRPC's threads leave the lent reply buffers they are done with, for Python's next
// drain to release under the GIL. Every lent buffer shares it, so it outlives the engine: a
// buffer let go after the engine is gone (the process is stopping) is leaked, never touched.
struct ReleaseSink {
  std::mutex mu;
  std::vector<HeldBuffer*> released;
  int efd = -1;  // -1 once the engine is gone
};

// An answer from Python, for the sender thread to start.
struct Command {
  enum Kind { WRITE, FINISH };
  Command(Kind kind, uint64_t id) : kind(kind), id(id) {}
  Kind kind;
  uint64_t id;
  grpc::Status status;
  // A FINISH with a reply message: an empty one (b"", a default protobuf message) too, which
  // `buffer.Valid()` alone would not tell from no message at all.
  bool has_buffer = false;
  grpc::ByteBuffer buffer;
  bool tell_done = true;
};

// What a completion-queue tag stands for.
struct Tag {
  enum Op { ACCEPT, READ, WRITE, FINISH, DONE } op;
  Call* call;
};

// Copies `buffer` into a new memfd; -1 (and `buffer` untouched) where that fails. Written
// with pwritev, not through a mapping: the kernel fills each new page straight from the
// slices, without a page fault per page, zeroing pages about to be overwritten or an unmap
// (measured on a 16 MiB ModelInfer: those were a third of the server process's CPU).
int CopyToMemfd(grpc::ByteBuffer* buffer, size_t size) {
  std::vector<grpc::Slice> slices;
  if (!buffer->Dump(&slices).ok()) return -1;
  std::vector<iovec> pieces;
  pieces.reserve(slices.size());
  for (auto& slice : slices) {
    if (slice.size() > 0) {
      pieces.push_back({const_cast<uint8_t*>(slice.begin()), slice.size()});
    }
  }
  int fd = memfd_create("workbench-grpc-body", MFD_CLOEXEC);
  if (fd < 0) return -1;
  size_t first = 0;
  off_t written = 0;
  while (first < pieces.size()) {
    int count = static_cast<int>(std::min<size_t>(pieces.size() - first, IOV_MAX));
    ssize_t n = pwritev(fd, &pieces[first], count, written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    written += n;
    for (size_t left = static_cast<size_t>(n); left > 0;) {  // past what was written
      iovec& piece = pieces[first];
      size_t step = std::min(left, piece.iov_len);
      piece.iov_base = static_cast<char*>(piece.iov_base) + step;
      piece.iov_len -= step;
      left -= step;
      if (piece.iov_len == 0) ++first;
    }
  }
  if (static_cast<size_t>(written) != size) {
    close(fd);
    return -1;
  }
  buffer->Clear();
  return fd;
}

// The server, its completion queue and the thread that runs it. Events go to Python through
// a queue and an eventfd; Python's answers come back through another, to a sender thread.
class Engine {
 public:
  Engine()
      : efd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)), sink_(std::make_shared<ReleaseSink>()) {
    sink_->efd = efd_;
  }
  ~Engine() {  // with the GIL (the Python object's dealloc), after Shutdown
    outbox_.clear();  // answers never sent: their lent buffers go to the sink
    for (auto& event : events_) {
      if (event.shared_fd >= 0) close(event.shared_fd);
    }
    events_.clear();
    ReleaseHeldBuffers();
    {
      std::lock_guard<std::mutex> lock(sink_->mu);
      sink_->efd = -1;
    }
    if (efd_ >= 0) close(efd_);
  }

  int efd() const { return efd_; }
  std::set<std::string> streaming;
  std::string share_method;
  size_t share_from = 0;

  // Listens on `address` (the builder carries the channel arguments); the port, 0 if none.
  int Start(grpc::ServerBuilder* builder, const std::string& address) {
    int port = 0;
    builder->AddListeningPort(address, grpc::InsecureServerCredentials(), &port);
    builder->RegisterAsyncGenericService(&service_);
    cq_ = builder->AddCompletionQueue();
    server_ = builder->BuildAndStart();
    if (!server_ || port == 0) {
      if (server_) server_->Shutdown();
      cq_->Shutdown();
      void* tag;
      bool ok;
      while (cq_->Next(&tag, &ok)) {
      }
      server_.reset();
      return 0;
    }
    Accept();
    thread_ = std::thread([this] { Run(); });
    sender_ = std::thread([this] { Send(); });
    return port;
  }

  // Refuses new calls, cancels those left after `deadline`, and waits for the threads.
  void Shutdown(std::chrono::system_clock::time_point deadline) {
    if (!server_) return;
    stopping_ = true;
    server_->Shutdown(deadline);  // the sender still finishes the calls Python answers
    {
      std::lock_guard<std::mutex> lock(outbox_mu_);
      sender_stop_ = true;
    }
    outbox_cv_.notify_one();
    if (sender_.joinable()) sender_.join();
    // Every call is cancelled by now; the queue's thread ends each (its tags come back) and
    // only then may the queue shut down: an operation started on a queue that is shut down
    // aborts the process. Bounded, in case a call never ends (it is then left behind).
    {
      std::unique_lock<std::mutex> lock(live_mu_);
      live_cv_.wait_for(lock, std::chrono::seconds(10), [this] { return live_calls_ == 0; });
    }
    cq_->Shutdown();
    if (thread_.joinable()) thread_.join();
    server_.reset();
  }

  void CallBorn() {
    std::lock_guard<std::mutex> lock(live_mu_);
    ++live_calls_;
  }

  void CallDied() {
    std::lock_guard<std::mutex> lock(live_mu_);
    if (--live_calls_ == 0) live_cv_.notify_all();
  }

  // Python's thread: an answer for the sender thread (which is woken when it waits).
  void Post(Command&& command) {
    bool wake;
    {
      std::lock_guard<std::mutex> lock(outbox_mu_);
      if (sender_stop_) return;  // stopped: the call is over (its buffers go to the sink)
      outbox_.push_back(std::move(command));
      wake = sender_waiting_;
      sender_waiting_ = false;
    }
    if (wake) outbox_cv_.notify_one();
  }

  void Push(Event&& event) {
    bool wake;
    {
      std::lock_guard<std::mutex> lock(events_mu_);
      wake = events_.empty();
      events_.push_back(std::move(event));
    }
    if (wake) {
      uint64_t one = 1;
      ssize_t written = write(efd_, &one, sizeof one);
      (void)written;  // a full counter already wakes the loop
    }
  }

  // Clears the eventfd: call before taking what it woke the loop for.
  void Woken() {
    uint64_t count;
    ssize_t got = read(efd_, &count, sizeof count);
    (void)got;  // EAGAIN: woken for events already taken
  }

  std::vector<Event> TakeEvents() {
    std::vector<Event> events;
    std::lock_guard<std::mutex> lock(events_mu_);
    events.swap(events_);
    return events;
  }

  std::shared_ptr<Call> Find(uint64_t id) {
    std::lock_guard<std::mutex> lock(calls_mu_);
    auto found = calls_.find(id);
    return found == calls_.end() ? nullptr : found->second;
  }

  void Register(uint64_t id, std::shared_ptr<Call> call) {
    std::lock_guard<std::mutex> lock(calls_mu_);
    calls_.emplace(id, std::move(call));
  }

  void Forget(uint64_t id) {
    std::lock_guard<std::mutex> lock(calls_mu_);
    calls_.erase(id);
  }

  bool stopping() const { return stopping_; }
  void Accept();
  // Starts what `command` asks (on the sender thread, or the caller's).
  void Execute(Command* command);
  const std::shared_ptr<ReleaseSink>& sink() const { return sink_; }
  void ReleaseHeldBuffers();

 private:
  void Run();
  void Send();

  const int efd_;
  grpc::AsyncGenericService service_;
  std::unique_ptr<grpc::ServerCompletionQueue> cq_;
  std::unique_ptr<grpc::Server> server_;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  uint64_t next_id_ = 1;  // the completion-queue thread's (and Start's, before it runs)
  std::mutex calls_mu_;
  std::unordered_map<uint64_t, std::shared_ptr<Call>> calls_;
  std::mutex events_mu_;
  std::vector<Event> events_;
  std::shared_ptr<ReleaseSink> sink_;
  std::mutex live_mu_;
  std::condition_variable live_cv_;
  int live_calls_ = 0;
  std::thread sender_;
  std::mutex outbox_mu_;
  std::condition_variable outbox_cv_;
  std::vector<Command> outbox_;
  bool sender_waiting_ = false;
  bool sender_stop_ = false;
};

// One call. Its state is under `mu_`: the completion-queue thread reacts to its tags, the
// sender thread writes and finishes it. gRPC never runs our code inside an operation we start (every
// completion comes through the queue), so operations are started with `mu_` held.
class Call {
 public:
  Call(Engine* engine, uint64_t id) : engine_(engine), id_(id), stream_(&context_) {
    engine_->CallBorn();
  }
  ~Call() { engine_->CallDied(); }

  // Waits for the next call; `self` keeps this alive until every tag of it is back.
  void Request(std::shared_ptr<Call> self, grpc::AsyncGenericService* service,
               grpc::ServerCompletionQueue* cq) {
    self_ = std::move(self);
    context_.AsyncNotifyWhenDone(&done_tag_);
    service->RequestCall(&context_, &stream_, cq, cq, &accept_tag_);
  }

  // The completion-queue thread: one of this call's operations completed.
  void Proceed(Tag::Op op, bool ok) {
    std::shared_ptr<Call> over;  // let go (maybe the last owner) after the lock
    {
      std::lock_guard<std::mutex> lock(mu_);
      switch (op) {
        case Tag::ACCEPT:
          Accepted(ok);
          if (!ok) over = std::move(self_);  // shutting down: never matched with a call
          break;
        case Tag::READ:
          reading_ = false;
          ReadDone(ok);
          break;
        case Tag::WRITE:
          writing_ = false;
          WriteDone(ok);
          break;
        case Tag::FINISH:
          finish_pending_ = false;
          finished_ = true;
          break;
        case Tag::DONE:
          done_pending_ = false;
          if (context_.IsCancelled()) {
            engine_->Push(Event(CANCEL, id_));
            EndLocked(grpc::Status::CANCELLED, nullptr);
          }
          break;
      }
      if (accepted_ && finished_ && !reading_ && !writing_ && !finish_pending_ &&
          !done_pending_) {
        if (tell_done_) engine_->Push(Event(DONE, id_));
        engine_->Forget(id_);
        over = std::move(self_);
      }
    }
  }

  // The sender thread: a stream's response, after those queued.
  void Write(grpc::ByteBuffer* message) {
    std::lock_guard<std::mutex> lock(mu_);
    if (finishing_) return;
    writes_.emplace_back();
    writes_.back().Swap(message);
    if (!writing_) WriteNext();
  }

  // The sender thread: ends the call with `status`, after `last` (a unary reply) and the writes
  // still queued; DONE is sent when it is over unless `tell_done` is false.
  void End(const grpc::Status& status, grpc::ByteBuffer* last, bool tell_done) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!tell_done) tell_done_ = false;
    EndLocked(status, last);
  }

  void SetCompression(grpc_compression_algorithm algorithm) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!finishing_) context_.set_compression_algorithm(algorithm);
  }

  // A stream's next message is asked of gRPC only while reading is on: off, the client's
  // messages wait in gRPC's flow-control window (and then the client), not in our memory.
  void SetReading(bool on) {
    std::lock_guard<std::mutex> lock(mu_);
    holding_reads_ = !on;
    if (on && read_wanted_ && !finishing_ && !reading_) {
      read_wanted_ = false;
      StartRead();
    }
  }

 private:
  void Accepted(bool ok) {
    if (!ok) return;
    accepted_ = true;
    done_pending_ = true;
    engine_->Register(id_, self_);
    if (!engine_->stopping()) engine_->Accept();
    streaming_ = engine_->streaming.count(context_.method()) > 0;
    if (streaming_) engine_->Push(Announce());
    StartRead();
  }

  void StartRead() {
    reading_ = true;
    stream_.Read(&read_, &read_tag_);
  }

  void ReadDone(bool ok) {
    if (!streaming_) {
      Event event = Announce();
      if (ok) Take(&event);
      engine_->Push(std::move(event));
      return;
    }
    if (!ok) {
      engine_->Push(Event(HALF_CLOSE, id_));
      return;
    }
    Event event(MESSAGE, id_);
    Take(&event);
    engine_->Push(std::move(event));
    if (finishing_) return;
    if (holding_reads_) {
      read_wanted_ = true;  // asked for once reading goes on
    } else {
      StartRead();
    }
  }

  void WriteNext() {
    writing_ = true;
    stream_.Write(writes_.front(), &write_tag_);
  }

  void WriteDone(bool ok) {
    writes_.pop_front();
    Event event(WRITE_DONE, id_);
    event.ok = ok;
    engine_->Push(std::move(event));
    if (!writes_.empty() && ok) {
      WriteNext();
      return;
    }
    for (size_t dropped = 0; dropped < writes_.size(); ++dropped) {
      Event lost(WRITE_DONE, id_);  // after a failed write the rest cannot go either
      engine_->Push(std::move(lost));
    }
    writes_.clear();
    if (finishing_ && !finish_pending_ && !finished_) FinishNow();
  }

  void EndLocked(const grpc::Status& status, grpc::ByteBuffer* last) {
    if (finishing_) return;
    finishing_ = true;
    status_ = status;
    if (last != nullptr && writes_.empty() && !writing_) {
      writes_.emplace_back();
      writes_.back().Swap(last);
      finish_pending_ = true;
      stream_.WriteAndFinish(writes_.front(), grpc::WriteOptions(), status, &finish_tag_);
      return;
    }
    if (last != nullptr) {
      writes_.emplace_back();
      writes_.back().Swap(last);
      if (!writing_) WriteNext();
      return;  // finished after the last write
    }
    if (!writing_) FinishNow();
  }

  void FinishNow() {
    finish_pending_ = true;
    stream_.Finish(status_, &finish_tag_);
  }

  Event Announce() {
    Event event(CALL, id_);
    event.method = context_.method();
    for (const auto& [key, value] : context_.client_metadata()) {
      event.metadata.emplace_back(std::string(key.data(), key.size()),
                                  std::string(value.data(), value.size()));
    }
    return event;
  }

  void Take(Event* event) {
    event->has_message = true;
    size_t size = read_.Length();
    if (!streaming_ && engine_->share_from > 0 && size >= engine_->share_from &&
        context_.method() == engine_->share_method) {
      int fd = CopyToMemfd(&read_, size);
      if (fd >= 0) {
        event->shared_fd = fd;
        event->shared_size = size;
        return;
      }
    }
    event->message.Swap(&read_);
    read_.Clear();
  }

  Engine* engine_;
  const uint64_t id_;
  std::shared_ptr<Call> self_;
  grpc::GenericServerContext context_;
  grpc::GenericServerAsyncReaderWriter stream_;
  Tag accept_tag_{Tag::ACCEPT, this};
  Tag read_tag_{Tag::READ, this};
  Tag write_tag_{Tag::WRITE, this};
  Tag finish_tag_{Tag::FINISH, this};
  Tag done_tag_{Tag::DONE, this};
  std::mutex mu_;
  grpc::ByteBuffer read_;
  std::deque<grpc::ByteBuffer> writes_;  // the front one is being written
  bool streaming_ = false;
  bool accepted_ = false;
  bool reading_ = false;
  bool holding_reads_ = false;  // set_reading(id, False): no next read until set on again
  bool read_wanted_ = false;    // a read held back while holding_reads_
  bool writing_ = false;
  bool finishing_ = false;
  bool finish_pending_ = false;
  bool finished_ = false;
  bool done_pending_ = false;
  bool tell_done_ = true;
  grpc::Status status_;
};

void Engine::Accept() {
  auto call = std::make_shared<Call>(this, next_id_++);
  Call* raw = call.get();
  raw->Request(std::move(call), &service_, cq_.get());
}

// The sender thread: starts the operations Python's answers ask for, off the event loop's
// thread (a reply's send path costs ~60-120 us of CPU, more while the queue's thread is busy
// with the same connection) and without a wake-up through the completion queue.
// Our threads yield to the event loop's: a thread of SCHED_BATCH does not preempt the one
// that woke it, so the loop is not descheduled in the middle of posting an answer (measured at
// concurrency 8 on 2 cores: `finish` took 11 us of CPU but 44 us of wall time without it).
void YieldToTheLoop() {
  sched_param param{};
  param.sched_priority = 0;
  pthread_setschedparam(pthread_self(), SCHED_BATCH, &param);
}

void Engine::Send() {
  YieldToTheLoop();
  std::vector<Command> commands;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(outbox_mu_);
      while (outbox_.empty() && !sender_stop_) {
        sender_waiting_ = true;
        outbox_cv_.wait(lock);
      }
      if (outbox_.empty()) return;  // stopping, and nothing left to send
      commands.swap(outbox_);
    }
    for (Command& command : commands) Execute(&command);
    commands.clear();  // lent buffers go to the sink
  }
}

void Engine::Execute(Command* command) {
  std::shared_ptr<Call> call = Find(command->id);
  if (!call) return;  // over already (cancelled, say)
  switch (command->kind) {
    case Command::WRITE:
      call->Write(&command->buffer);
      break;
    case Command::FINISH:
      call->End(command->status, command->has_buffer ? &command->buffer : nullptr,
                command->tell_done);
      break;
  }
}

void Engine::Run() {
  YieldToTheLoop();
  void* raw;
  bool ok;
  while (cq_->Next(&raw, &ok)) {
    auto* tag = static_cast<Tag*>(raw);
    tag->call->Proceed(tag->op, ok);
  }
}

// A reply's bytes lent to gRPC without a copy. gRPC lets go of them on any thread, where the
// GIL may not be taken (the queue's thread must never wait for it): the engine keeps them
// until Python's next `drain`, which releases them.
struct HeldBuffer {
  Py_buffer view;
  std::shared_ptr<ReleaseSink> sink;
};

void ReleaseHeld(void* data) {
  auto* held = static_cast<HeldBuffer*>(data);
  std::shared_ptr<ReleaseSink> sink = held->sink;
  std::lock_guard<std::mutex> lock(sink->mu);
  if (sink->efd < 0) return;  // the engine is gone: leaked, not touched
  sink->released.push_back(held);
  uint64_t one = 1;
  ssize_t written = write(sink->efd, &one, sizeof one);
  (void)written;
}

// With the GIL: lets go of the lent buffers gRPC is done with.
void Engine::ReleaseHeldBuffers() {
  std::vector<HeldBuffer*> released;
  {
    std::lock_guard<std::mutex> lock(sink_->mu);
    released.swap(sink_->released);
  }
  for (HeldBuffer* held : released) {
    PyBuffer_Release(&held->view);
    delete held;
  }
}

// One buffer's slice: copied when small, lent (kept until gRPC lets go) when large.
bool AppendSlice(Engine* engine, PyObject* object, std::vector<grpc::Slice>* slices) {
  Py_buffer view;
  if (PyObject_GetBuffer(object, &view, PyBUF_SIMPLE) != 0) return false;
  size_t size = static_cast<size_t>(view.len);
  if (size < kLendFrom) {
    slices->emplace_back(view.buf, size);
    PyBuffer_Release(&view);
    return true;
  }
  auto* held = new HeldBuffer{view, engine->sink()};
  slices->emplace_back(view.buf, size, ReleaseHeld, held);
  return true;
}

// `object` (a buffer, or a list of buffers: a message's parts in order) as a ByteBuffer.
// False (with a Python error): not one.
bool ToByteBuffer(Engine* engine, PyObject* object, grpc::ByteBuffer* out) {
  std::vector<grpc::Slice> slices;
  if (PyList_Check(object)) {
    Py_ssize_t count = PyList_GET_SIZE(object);
    slices.reserve(static_cast<size_t>(count));
    for (Py_ssize_t i = 0; i < count; ++i) {
      if (!AppendSlice(engine, PyList_GET_ITEM(object, i), &slices)) return false;
    }
  } else if (!AppendSlice(engine, object, &slices)) {
    return false;
  }
  grpc::ByteBuffer buffer(slices.data(), slices.size());
  out->Swap(&buffer);
  return true;
}

PyObject* MessageBytes(grpc::ByteBuffer* buffer) {
  std::vector<grpc::Slice> slices;
  if (!buffer->Dump(&slices).ok()) return PyBytes_FromStringAndSize(nullptr, 0);
  size_t size = 0;
  for (const auto& slice : slices) size += slice.size();
  if (slices.size() == 1) {
    return PyBytes_FromStringAndSize(reinterpret_cast<const char*>(slices[0].begin()),
                                     static_cast<Py_ssize_t>(size));
  }
  PyObject* bytes = PyBytes_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(size));
  if (bytes == nullptr) return nullptr;
  char* at = PyBytes_AS_STRING(bytes);
  for (const auto& slice : slices) {
    std::memcpy(at, slice.begin(), slice.size());
    at += slice.size();
  }
  return bytes;
}

// Text a client sent (a method, a metadata key), as str; bytes that are not UTF-8 kept as
// surrogates, so that no client can make the event unreadable.
PyObject* Text(const std::string& text) {
  return PyUnicode_DecodeUTF8(text.data(), static_cast<Py_ssize_t>(text.size()),
                              "surrogateescape");
}

PyObject* MetadataTuple(const std::vector<std::pair<std::string, std::string>>& pairs) {
  PyObject* tuple = PyTuple_New(static_cast<Py_ssize_t>(pairs.size()));
  if (tuple == nullptr) return nullptr;
  for (size_t i = 0; i < pairs.size(); ++i) {
    const auto& [key, value] = pairs[i];
    bool binary = key.size() >= 4 && key.compare(key.size() - 4, 4, "-bin") == 0;
    PyObject* item = nullptr;
    if (PyObject* name = Text(key)) {
      PyObject* text = binary ? nullptr : PyUnicode_DecodeUTF8(value.data(), value.size(), nullptr);
      if (text == nullptr) {  // binary, or not UTF-8 text: passed as bytes
        PyErr_Clear();
        text = PyBytes_FromStringAndSize(value.data(), static_cast<Py_ssize_t>(value.size()));
      }
      item = text == nullptr ? nullptr : PyTuple_Pack(2, name, text);
      Py_XDECREF(text);
      Py_DECREF(name);
    }
    if (item == nullptr) {
      Py_DECREF(tuple);
      return nullptr;
    }
    PyTuple_SET_ITEM(tuple, static_cast<Py_ssize_t>(i), item);
  }
  return tuple;
}

PyObject* EventTuple(Event* event) {
  unsigned long long id = event->id;
  switch (event->kind) {
    case CALL: {
      PyObject* metadata = MetadataTuple(event->metadata);
      if (metadata == nullptr) return nullptr;
      PyObject* message;
      if (event->shared_fd >= 0) {
        message = Py_BuildValue("(in)", event->shared_fd, (Py_ssize_t)event->shared_size);
        event->shared_fd = -1;  // Python owns it now
      } else if (event->has_message) {
        message = MessageBytes(&event->message);
      } else {
        message = Py_NewRef(Py_None);
      }
      if (message == nullptr) {
        Py_DECREF(metadata);
        return nullptr;
      }
      PyObject* method = Text(event->method);
      if (method == nullptr) {
        Py_DECREF(metadata);
        Py_DECREF(message);
        return nullptr;
      }
      return Py_BuildValue("(iKNNN)", CALL, id, method, metadata, message);
    }
    case MESSAGE: {
      PyObject* message = MessageBytes(&event->message);
      if (message == nullptr) return nullptr;
      return Py_BuildValue("(iKN)", MESSAGE, id, message);
    }
    case WRITE_DONE:
      return Py_BuildValue("(iKO)", WRITE_DONE, id, event->ok ? Py_True : Py_False);
    default:
      return Py_BuildValue("(iK)", event->kind, id);
  }
}

// -- the Python type -----------------------------------------------------------------------

struct ServerObject {
  PyObject_HEAD
  Engine* engine;
  bool started;
};

int Server_init(ServerObject* self, PyObject* args, PyObject* kwargs) {
  static const char* names[] = {"streaming", "share_method", "share_from", nullptr};
  PyObject* streaming = nullptr;
  const char* share_method = "";
  Py_ssize_t share_from = 0;
  if (self->engine != nullptr) {
    PyErr_SetString(PyExc_RuntimeError, "the server is initialised already");
    return -1;
  }
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|Osn", const_cast<char**>(names), &streaming,
                                   &share_method, &share_from)) {
    return -1;
  }
  auto engine = std::make_unique<Engine>();
  if (engine->efd() < 0) {
    PyErr_SetFromErrno(PyExc_OSError);
    return -1;
  }
  if (streaming != nullptr) {
    PyObject* iterator = PyObject_GetIter(streaming);
    if (iterator == nullptr) return -1;
    while (PyObject* item = PyIter_Next(iterator)) {
      const char* text = PyUnicode_AsUTF8(item);
      if (text != nullptr) engine->streaming.insert(text);
      Py_DECREF(item);
      if (text == nullptr) break;
    }
    Py_DECREF(iterator);
    if (PyErr_Occurred()) return -1;
  }
  engine->share_method = share_method;
  engine->share_from = share_from > 0 ? static_cast<size_t>(share_from) : 0;
  self->engine = engine.release();
  return 0;
}

void Server_dealloc(ServerObject* self) {
  if (self->engine != nullptr) {
    Py_BEGIN_ALLOW_THREADS;
    self->engine->Shutdown(std::chrono::system_clock::now());
    Py_END_ALLOW_THREADS;
    delete self->engine;
  }
  Py_TYPE(self)->tp_free(reinterpret_cast<PyObject*>(self));
}

bool Ready(ServerObject* self) {
  if (self->engine == nullptr) {
    PyErr_SetString(PyExc_RuntimeError, "the server was not initialised");
    return false;
  }
  return true;
}

// The channel arguments [(name, int | str)] onto `builder`; false (with an error) if not.
bool AddArguments(grpc::ServerBuilder* builder, PyObject* options) {
  PyObject* iterator = PyObject_GetIter(options);
  if (iterator == nullptr) return false;
  while (PyObject* item = PyIter_Next(iterator)) {
    const char* name;
    PyObject* value;
    bool parsed = PyArg_ParseTuple(item, "sO", &name, &value);
    if (parsed && PyLong_Check(value)) {
      long number = PyLong_AsLong(value);
      if (number == -1 && PyErr_Occurred()) parsed = false;
      else builder->AddChannelArgument(name, static_cast<int>(number));
    } else if (parsed && PyUnicode_Check(value)) {
      const char* text = PyUnicode_AsUTF8(value);
      if (text == nullptr) parsed = false;
      else builder->AddChannelArgument(name, std::string(text));
    } else if (parsed) {
      PyErr_Format(PyExc_TypeError, "channel argument %s: expected int or str", name);
      parsed = false;
    }
    Py_DECREF(item);
    if (!parsed) {
      Py_DECREF(iterator);
      return false;
    }
  }
  Py_DECREF(iterator);
  return !PyErr_Occurred();
}

// start(address, options: [(name, int | str)]) -> the bound port (0: it could not bind)
PyObject* Server_start(ServerObject* self, PyObject* args) {
  const char* address;
  PyObject* options;
  if (!Ready(self) || !PyArg_ParseTuple(args, "sO", &address, &options)) return nullptr;
  if (self->started) {
    PyErr_SetString(PyExc_RuntimeError, "a server starts once");
    return nullptr;
  }
  grpc::ServerBuilder builder;
  if (!AddArguments(&builder, options)) return nullptr;
  self->started = true;
  int port;
  std::string target(address);
  Py_BEGIN_ALLOW_THREADS;
  port = self->engine->Start(&builder, target);
  Py_END_ALLOW_THREADS;
  return PyLong_FromLong(port);
}

// shutdown(grace_s): refuse new calls, cancel those still running after grace_s, wait for all.
PyObject* Server_shutdown(ServerObject* self, PyObject* args) {
  double grace = 0;
  if (!Ready(self) || !PyArg_ParseTuple(args, "d", &grace)) return nullptr;
  auto deadline = std::chrono::system_clock::now() +
                  std::chrono::microseconds(static_cast<int64_t>(grace * 1e6));
  Py_BEGIN_ALLOW_THREADS;
  self->engine->Shutdown(deadline);
  Py_END_ALLOW_THREADS;
  Py_RETURN_NONE;
}

PyObject* Server_fileno(ServerObject* self, PyObject*) {
  if (!Ready(self)) return nullptr;
  return PyLong_FromLong(self->engine->efd());
}

// drain() -> [event tuple, ...]: every event waiting, oldest first.
PyObject* Server_drain(ServerObject* self, PyObject*) {
  if (!Ready(self)) return nullptr;
  Engine* engine = self->engine;
  engine->Woken();  // first: a buffer released from now on wakes the loop again
  engine->ReleaseHeldBuffers();
  std::vector<Event> events = engine->TakeEvents();
  PyObject* list = PyList_New(0);
  if (list == nullptr) return nullptr;
  for (Event& event : events) {
    PyObject* item = EventTuple(&event);
    if (item == nullptr || PyList_Append(list, item) != 0) {
      // This event alone is lost (no memory, say); the others still reach Python.
      Py_XDECREF(item);
      PyErr_Clear();
      if (event.shared_fd >= 0) close(event.shared_fd);
      if (event.kind == CALL) {  // nobody will answer it: end it here
        Command command(Command::FINISH, event.id);
        command.status = grpc::Status(grpc::StatusCode::INTERNAL, "the request could not be read");
        command.tell_done = false;
        Py_BEGIN_ALLOW_THREADS;
        engine->Execute(&command);
        Py_END_ALLOW_THREADS;
      }
      continue;
    }
    Py_DECREF(item);
  }
  return list;
}

// write(id, data): a stream's response (WRITE_DONE tells when it is written)
PyObject* Server_write(ServerObject* self, PyObject* args) {
  unsigned long long id;
  PyObject* data;
  if (!Ready(self) || !PyArg_ParseTuple(args, "KO", &id, &data)) return nullptr;
  Command command(Command::WRITE, id);
  if (!ToByteBuffer(self->engine, data, &command.buffer)) return nullptr;
  self->engine->Post(std::move(command));
  Py_RETURN_NONE;
}

// finish(id, code, details, data=None, tell_done=True, here=False): end the call (after
// `data`, a unary reply); DONE is sent when it is over unless `tell_done` is false. `here`:
// start the operation on this thread (without the GIL) instead of the sender's: one thread
// hop less, for a caller with nothing else to do.
PyObject* Server_finish(ServerObject* self, PyObject* args) {
  unsigned long long id;
  int code;
  const char* details;
  Py_ssize_t details_size;
  PyObject* data = Py_None;
  int tell_done = 1;
  int here = 0;
  if (!Ready(self) || !PyArg_ParseTuple(args, "Kis#|Opp", &id, &code, &details, &details_size,
                                        &data, &tell_done, &here)) {
    return nullptr;
  }
  Command command(Command::FINISH, id);
  if (data != Py_None) {
    if (!ToByteBuffer(self->engine, data, &command.buffer)) return nullptr;
    command.has_buffer = true;
  }
  command.status =
      grpc::Status(static_cast<grpc::StatusCode>(code), std::string(details, details_size));
  command.tell_done = tell_done != 0;
  if (here) {
    Py_BEGIN_ALLOW_THREADS;
    self->engine->Execute(&command);
    command.buffer.Clear();  // lent buffers go to the sink
    Py_END_ALLOW_THREADS;
  } else {
    self->engine->Post(std::move(command));
  }
  Py_RETURN_NONE;
}

// set_compression(id, algorithm): gRPC core's compression algorithm for the call's replies
PyObject* Server_set_compression(ServerObject* self, PyObject* args) {
  unsigned long long id;
  int algorithm;
  if (!Ready(self) || !PyArg_ParseTuple(args, "Ki", &id, &algorithm)) return nullptr;
  if (algorithm < 0 || algorithm >= GRPC_COMPRESS_ALGORITHMS_COUNT) {
    PyErr_Format(PyExc_ValueError, "unknown compression algorithm %d", algorithm);
    return nullptr;
  }
  // At once, not through the sender: a reply the loop starts itself must not overtake it.
  Engine* engine = self->engine;
  Py_BEGIN_ALLOW_THREADS;
  std::shared_ptr<Call> call = engine->Find(id);
  if (call) call->SetCompression(static_cast<grpc_compression_algorithm>(algorithm));
  Py_END_ALLOW_THREADS;
  Py_RETURN_NONE;
}

// set_reading(id, on): whether a stream's next message is read (on by default); off, what the
// client sends waits in gRPC's flow control
PyObject* Server_set_reading(ServerObject* self, PyObject* args) {
  unsigned long long id;
  int on;
  if (!Ready(self) || !PyArg_ParseTuple(args, "Kp", &id, &on)) return nullptr;
  Engine* engine = self->engine;
  Py_BEGIN_ALLOW_THREADS;
  std::shared_ptr<Call> call = engine->Find(id);
  if (call) call->SetReading(on != 0);
  Py_END_ALLOW_THREADS;
  Py_RETURN_NONE;
}

PyMethodDef kServerMethods[] = {
    {"start", reinterpret_cast<PyCFunction>(Server_start), METH_VARARGS, nullptr},
    {"shutdown", reinterpret_cast<PyCFunction>(Server_shutdown), METH_VARARGS, nullptr},
    {"fileno", reinterpret_cast<PyCFunction>(Server_fileno), METH_NOARGS, nullptr},
    {"drain", reinterpret_cast<PyCFunction>(Server_drain), METH_NOARGS, nullptr},
    {"write", reinterpret_cast<PyCFunction>(Server_write), METH_VARARGS, nullptr},
    {"finish", reinterpret_cast<PyCFunction>(Server_finish), METH_VARARGS, nullptr},
    {"set_compression", reinterpret_cast<PyCFunction>(Server_set_compression), METH_VARARGS,
     nullptr},
    {"set_reading", reinterpret_cast<PyCFunction>(Server_set_reading), METH_VARARGS, nullptr},
    {nullptr, nullptr, 0, nullptr},
};

PyTypeObject kServerType = {PyVarObject_HEAD_INIT(nullptr, 0)};

PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "_native",
                       "gRPC's C++ server, every RPC handed to Python as raw bytes.", -1};

}  // namespace

PyMODINIT_FUNC PyInit__native(void) {
  // gRPC's locks are abseil's. Debian's abseil tracks the order every lock is taken in, to
  // report cycles (a debug aid, off in abseil's release builds): 8% of the completion-queue
  // thread's CPU at gRPC c=1, about 0.5% of the whole process's at c=8 (benchmarks/README.md).
  // Our process does not need the report.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  kServerType.tp_name = "workbench.server.grpc._native.Server";
  kServerType.tp_basicsize = sizeof(ServerObject);
  kServerType.tp_flags = Py_TPFLAGS_DEFAULT;
  kServerType.tp_new = PyType_GenericNew;
  kServerType.tp_init = reinterpret_cast<initproc>(Server_init);
  kServerType.tp_dealloc = reinterpret_cast<destructor>(Server_dealloc);
  kServerType.tp_methods = kServerMethods;
  if (PyType_Ready(&kServerType) < 0) return nullptr;
  PyObject* module = PyModule_Create(&kModule);
  if (module == nullptr) return nullptr;
  Py_INCREF(&kServerType);
  if (PyModule_AddObject(module, "Server", reinterpret_cast<PyObject*>(&kServerType)) < 0) {
    Py_DECREF(&kServerType);
    Py_DECREF(module);
    return nullptr;
  }
  PyModule_AddIntConstant(module, "CALL", CALL);
  PyModule_AddIntConstant(module, "MESSAGE", MESSAGE);
  PyModule_AddIntConstant(module, "HALF_CLOSE", HALF_CLOSE);
  PyModule_AddIntConstant(module, "WRITE_DONE", WRITE_DONE);
  PyModule_AddIntConstant(module, "CANCEL", CANCEL);
  PyModule_AddIntConstant(module, "DONE", DONE);
  return module;
}
