# frozen_string_literal: true

# The EventMachine baseline (the autobench study): `GET /` and `GET /counter` behind the wire contract.
#
# Run by `python -m servers eventmachine ...`, which execs
# `ruby servers/baselines/eventmachine/server.rb eventmachine <the same arguments>`. It takes the
# contract's flags, uses --host, --port, --sink, --workers, --client-timeout-s, --protocol,
# --tls-cert and --tls-key and ignores the others.
#
# Protocols: h1, and h1-tls in EventMachine's own idiom (start_tls in post_init, TLS 1.3
# only). EventMachine's TLS has no ALPN (set_tls_parms takes none, and it registers no
# selection callback), so a client offering `http/1.1` (or `h2`) gets no ALPN answer and
# speaks HTTP/1.1 by default; EventMachine has no HTTP/2.
#
# The contract's constants are mirrored from servers/contract.py (this is not Python);
# tests/test_baselines.py checks the body, the headers and the telemetry fields against it.
#
# Process model: this process opens one listening socket per worker (SO_REUSEPORT when
# more than one, TCP_NODELAY inherited by accepted sockets, the contract's backlog) and
# hands it to EventMachine with EM.attach_server. With --workers N it forks N workers, each
# with its own socket and telemetry line, and forwards SIGTERM/SIGINT to them.

require 'eventmachine'
require 'etc'
require 'io/wait'
require 'json'
require 'openssl'
require 'socket'
require 'time'
require 'zlib'

TEXT_BODY = 'I am a stupid HTTP server!'
TEXT_CONTENT_TYPE = 'text/plain'
JSON_CONTENT_TYPE = 'application/json'
NOT_FOUND_BODY = 'not found'
LISTEN_BACKLOG = 65_535
TICK_INTERVAL_S = 0.010
TELEMETRY_INTERVAL_S = 1.0
HEAD_TIMEOUT_S = 10.0 # the slow-client deadlines (docs/contract.md, "Slow clients")
BODY_TIMEOUT_S = 30.0
MAX_CLIENT_TIMEOUT_S = 3600.0 # --client-timeout-s is in (0, 3600]
MAX_HEAD_BYTES = 16 * 1024 # request line + headers; more is answered 431 and closed
MAX_BODY_BYTES = 1024 * 1024 # bodies are read and dropped; a bigger one is answered 413
# The answers a connection may have waiting in EventMachine's outbound queue (the ciphertext
# over TLS) before its next requests wait unanswered and it is no longer read once its socket
# is full (Backpressure; docs/contract.md, "HTTP/2 limits: one hostile connection", the h1
# row). Our other servers' transports stop reading at the same: asyncio's write high-water
# mark, Twisted's buffer size.
MAX_UNSENT_BYTES = 64 * 1024
# A held connection's answers resume once its queue has drained to this (a low-water mark:
# answers go out in batches of half the bound, not one at a time).
RESUME_UNSENT_BYTES = MAX_UNSENT_BYTES / 2
PROTOCOLS = %w[h1 h1-tls].freeze # of contract.PROTOCOLS, the ones this server speaks
TLS_VERSIONS = %w[TLSv1_3].freeze # contract.TLS_MINIMUM_VERSION, in start_tls's words
TELEMETRY_FIELDS = %w[
  t pid open max_open requests messages bad tick_avg_ms tick_max_ms gc_collections
  gc_pause_ms stored sink_errors backlog rss_bytes framework loop port worker mc_port
  backend_errors
].freeze
SERVER_HEADER = "EventMachine/#{EventMachine::VERSION}"
# The boards' workloads' payloads (docs/contract.md), servers/contract.py's: `python -m servers`
# gives them in SERVERBENCH_WORKLOADS (contract.WORKLOADS_ENV, JSON), so none is copied here.
# Served: /json, /plaintext, /json-comp, /body/10k; not /delay/{ms} nor /upload (servers/__init__.py
# says why).
WORKLOADS = JSON.parse(ENV.fetch('SERVERBENCH_WORKLOADS') { abort('eventmachine: SERVERBENCH_WORKLOADS is not set: start me with python -m servers') })
JSON_COMP_BODY = JSON.generate(WORKLOADS['json_comp_document']).b
WORKLOAD_ROUTES = %w[/json /plaintext /json-comp /body/10k].freeze
PAGE_SIZE = Etc.sysconf(Etc::SC_PAGESIZE)

# The contract's command line: `eventmachine --host H --port P --sink S --workers N ...`.
Options = Struct.new(:host, :port, :sink, :workers, :client_timeout_s, :protocol, :tls_cert, :tls_key) do
  def tls?
    protocol == 'h1-tls'
  end

  # What each connection's start_tls is given (EventMachine reads the files per connection).
  def tls_parameters
    { private_key_file: tls_key, cert_chain_file: tls_cert, ssl_version: TLS_VERSIONS }
  end

  def head_timeout_s
    client_timeout_s || HEAD_TIMEOUT_S
  end

  def body_timeout_s
    client_timeout_s || BODY_TIMEOUT_S
  end
end

def parse_options(argv)
  options = Options.new('127.0.0.1', 0, 'empty', 1, nil, 'h1', nil, nil)
  args = argv.dup
  args.shift if args.first == 'eventmachine'
  until args.empty?
    flag = args.shift
    abort("eventmachine: unexpected argument #{flag.inspect}") unless flag.start_with?('--')
    flag, value = flag.split('=', 2)
    value ||= args.shift
    abort("eventmachine: #{flag} needs a value") if value.nil?
    case flag
    when '--host' then options.host = value
    when '--port' then options.port = Integer(value, exception: false) || abort("eventmachine: bad --port #{value}")
    when '--sink' then options.sink = value
    when '--workers' then options.workers = Integer(value, exception: false) || abort("eventmachine: bad --workers #{value}")
    when '--client-timeout-s'
      options.client_timeout_s = Float(value, exception: false) || abort("eventmachine: bad --client-timeout-s #{value}")
    when '--protocol' then options.protocol = value
    when '--tls-cert' then options.tls_cert = value
    when '--tls-key' then options.tls_key = value
    end # every other contract flag takes a value this server does not use
  end
  if options.sink != 'empty'
    warn 'eventmachine serves only the empty sink'
    exit 2
  end
  abort('eventmachine: --workers must be at least 1') if options.workers < 1
  timeout_s = options.client_timeout_s
  if timeout_s && !(timeout_s.positive? && timeout_s <= MAX_CLIENT_TIMEOUT_S)
    abort("eventmachine: --client-timeout-s must be in (0, #{MAX_CLIENT_TIMEOUT_S.to_i}], not #{timeout_s}")
  end
  check_protocol(options)
  options
end

# The protocol and, over TLS, a certificate that loads and matches its key: checked once
# here, since start_tls would only fail each connection's handshake.
def check_protocol(options)
  unless PROTOCOLS.include?(options.protocol)
    abort("eventmachine: protocol #{options.protocol} is not one of #{PROTOCOLS.join(', ')} " \
          '(EventMachine has no HTTP/2)')
  end
  if !options.tls?
    abort("eventmachine: protocol #{options.protocol} is cleartext: no --tls-cert/--tls-key") if options.tls_cert || options.tls_key
    return
  end
  abort("eventmachine: protocol #{options.protocol} needs --tls-cert and --tls-key") unless options.tls_cert && options.tls_key
  begin
    certificate = OpenSSL::X509::Certificate.new(File.read(options.tls_cert))
    key = OpenSSL::PKey.read(File.read(options.tls_key))
  rescue SystemCallError, OpenSSL::OpenSSLError => e
    abort("eventmachine: --tls-cert #{options.tls_cert} with --tls-key #{options.tls_key}: #{e.message}")
  end
  return if certificate.check_private_key(key)

  abort("eventmachine: --tls-cert #{options.tls_cert} was not issued for --tls-key #{options.tls_key}")
end

# Per-process counters, tick lag and the telemetry line (servers/core/state.py's ServerState).
class ServerState
  attr_accessor :open, :max_open, :requests, :bad, :port
  attr_reader :date

  def initialize(worker, port)
    @worker = worker
    @port = port
    @open = 0
    @max_open = 0
    @requests = 0
    @bad = 0
    @tick_last = nil
    @tick_lag_sum_s = 0.0
    @tick_lag_max_s = 0.0
    @tick_count = 0
    @date_second = nil
    refresh_date
  end

  def opened
    @open += 1
    @max_open = @open if @open > @max_open
  end

  def closed
    @open -= 1
  end

  def counter_payload
    JSON.generate({ 'open' => @open, 'max_open' => @max_open, 'requests' => @requests })
  end

  # The 10 ms timer's callback: the lag is the gap between ticks minus 10 ms.
  def tick
    now = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    if @tick_last
      lag_s = [now - @tick_last - TICK_INTERVAL_S, 0.0].max
      @tick_lag_sum_s += lag_s
      @tick_count += 1
      @tick_lag_max_s = lag_s if lag_s > @tick_lag_max_s
    end
    @tick_last = now
    refresh_date
  end

  # The Date header changes once a second: format it then, not per response.
  def refresh_date
    second = Time.now.to_i
    return if second == @date_second

    @date_second = second
    @date = Time.at(second).httpdate
  end

  def telemetry
    tick_avg_ms = @tick_count.zero? ? 0.0 : @tick_lag_sum_s / @tick_count * 1000.0
    gc = GC.stat
    record = {
      't' => Time.now.to_f.round(3), 'pid' => Process.pid, 'open' => @open,
      'max_open' => @max_open, 'requests' => @requests, 'messages' => 0, 'bad' => @bad,
      'tick_avg_ms' => tick_avg_ms.round(3), 'tick_max_ms' => (@tick_lag_max_s * 1000.0).round(3),
      'gc_collections' => gc[:count], 'gc_pause_ms' => (gc[:time] || 0).to_f,
      'stored' => 0, 'sink_errors' => 0, 'backlog' => 0, 'rss_bytes' => rss_bytes,
      'framework' => 'eventmachine', 'loop' => 'eventmachine', 'port' => @port,
      'worker' => @worker, 'mc_port' => 0, 'backend_errors' => 0
    }
    @tick_lag_sum_s = 0.0
    @tick_lag_max_s = 0.0
    @tick_count = 0
    record
  end

  def emit_telemetry
    $stdout.write(JSON.generate(telemetry) + "\n")
    $stdout.flush
  end

  private

  def rss_bytes
    File.read('/proc/self/statm').split[1].to_i * PAGE_SIZE
  rescue SystemCallError
    0
  end
end

def monotonic_s
  Process.clock_gettime(Process::CLOCK_MONOTONIC)
end

# The contract's slow-client deadlines (docs/contract.md, "Slow clients"). Each connection
# keeps one deadline (`due_at_s`), moved when the contract says: opened, a head arrived
# with a body still to come, a response sent. One periodic sweep closes the connections
# past theirs. EventMachine's comm_inactivity_timeout is an idle timer, which a trickle
# resets, and a timer per request would be armed and cancelled on the hot path.
class ClientDeadlines
  MAX_SWEEP_INTERVAL_S = 0.5

  attr_reader :head_timeout_s, :body_timeout_s

  def initialize(head_timeout_s, body_timeout_s)
    @head_timeout_s = head_timeout_s
    @body_timeout_s = body_timeout_s
    @connections = {}.compare_by_identity # a set, in insertion order
  end

  # A deadline is noticed within a quarter of the shorter one, and at most 500 ms late.
  def sweep_interval_s
    [MAX_SWEEP_INTERVAL_S, @head_timeout_s / 4, @body_timeout_s / 4].min
  end

  def watch(connection)
    @connections[connection] = true
  end

  def forget(connection)
    @connections.delete(connection)
  end

  def sweep
    now_s = monotonic_s
    late = @connections.each_key.select { |connection| connection.due_at_s < now_s }
    late.each do |connection|
      forget(connection)
      connection.close_connection # no 408: the close says it
    end
  end
end

# Bounds what a connection whose client does not read its answers costs: EventMachine's
# send_data queues without a limit, and its `pause` stops writing as well as reading.
#
# The bound follows EventMachine's own queue (get_outbound_data_size), the same for h1 and
# h1-tls: once MAX_UNSENT_BYTES wait there, the connection is held: its next requests stay
# unanswered in its buffer. A held connection is paused (no longer read) when its socket is
# full (nothing more would be written anyway), or when its unanswered requests exceed
# MAX_UNSENT_BYTES; it is resumed as soon as its socket is writable again, since a paused
# connection is not written either. A resumed connection's first read re-pauses it (one read:
# at most 16 KiB), and the writes of that same loop turn go out. Its answers resume once the
# queue has drained to RESUME_UNSENT_BYTES.
# EventMachine tells of neither a drained queue nor a writable socket, so both are asked: at
# the next loop turn while a held connection is being written (EM.next_tick), else on a timer.
# Over TLS EventMachine writes at most 16 records of ~2 KiB a loop turn, so a client reading
# as fast as it pipelines still has its unanswered requests grow by about a third of what it
# reads, while its answers stay bounded.
class Backpressure
  CHECK_INTERVAL_S = 0.010

  def initialize
    @held = {}.compare_by_identity # a set
    @next_turn_due = false
  end

  def hold(connection)
    @held[connection] = true
    check_next_turn
  end

  def forget(connection)
    @held.delete(connection)
  end

  def check
    @next_turn_due = false
    return if @held.empty?

    @held.keys.each(&:relieve)
    check_next_turn if @held.each_key.any?(&:reading?)
  end

  private

  def check_next_turn
    return if @next_turn_due

    @next_turn_due = true
    EventMachine.next_tick { check }
  end
end

# One HTTP/1.1 connection: a small parser (keep-alive, pipelining, Content-Length bodies)
# and the two routes. Every complete request in a read is answered in one send_data.
class HttpConnection < EventMachine::Connection
  REQUEST_LINE = %r{\A([!#$%&'*+\-.^_`|~0-9A-Za-z]+) (\S+) HTTP/(\d)\.(\d)\z}
  # A value holds no control character but HTAB (RFC 9110 §5.5): a NUL is refused.
  HEADER_LINE = /\A([!#$%&'*+\-.^_`|~0-9A-Za-z]+):[ \t]*([^\x00-\x08\x0a-\x1f\x7f]*?)[ \t]*\z/
  REASONS = {
    200 => 'OK', 400 => 'Bad Request', 404 => 'Not Found', 405 => 'Method Not Allowed',
    413 => 'Content Too Large',
    431 => 'Request Header Fields Too Large', 505 => 'HTTP Version Not Supported'
  }.freeze

  # When the head or body this connection waits for is due (ClientDeadlines).
  attr_reader :due_at_s

  def initialize(state, deadlines, backpressure, tls_parameters)
    super()
    @state = state
    @deadlines = deadlines
    @backpressure = backpressure
    @held = false # requests wait unanswered: MAX_UNSENT_BYTES of answers are queued
    @paused = false
    @socket = nil # the socket as an IO, to ask whether it is writable (Backpressure)
    @tls_parameters = tls_parameters # nil: cleartext
    @buffer = String.new(encoding: Encoding::BINARY)
    @closing = false
    @body_pending = false # a head arrived, its body has not
  end

  # Over TLS the handshake runs within the first head's deadline, as the head does.
  def post_init
    @state.opened
    @due_at_s = monotonic_s + @deadlines.head_timeout_s
    @deadlines.watch(self)
    start_tls(@tls_parameters) if @tls_parameters
  end

  def unbind
    @state.closed
    @deadlines.forget(self)
    @backpressure.forget(self)
    @socket = nil # the descriptor is closed, its number free for another
  end

  def receive_data(data)
    return if @closing

    @buffer << data
    # What EventMachine read in the same turn as a pause waits for the queue to drain.
    return if @paused

    answer
    # A held connection is read once per write while its requests exceed the bound, and
    # not at all while its socket is full (Backpressure).
    stop_reading if @held && (@buffer.bytesize > MAX_UNSENT_BYTES || !socket_writable?)
  end

  # Whether EventMachine reads (and writes) this connection: not while it is paused.
  def reading?
    !@paused
  end

  # A held connection's check (Backpressure): answers resume once the queue has drained to
  # RESUME_UNSENT_BYTES; it is read (and so written) again once its socket is writable, and
  # is no longer read once its socket is full.
  def relieve
    answer if get_outbound_data_size <= RESUME_UNSENT_BYTES
    if !@held || socket_writable?
      start_reading if @paused
    elsif !@paused
      stop_reading
    end
  end

  private

  # Whether the socket takes more output: its client read some of what it was sent.
  def socket_writable?
    @socket ||= IO.for_fd(EventMachine.get_file_descriptor(signature), 'r+', autoclose: false)
    !@socket.wait_writable(0).nil?
  end

  def stop_reading
    @paused = true
    pause
  end

  def start_reading
    @paused = false
    resume
  end

  # Answers the whole requests buffered, until MAX_UNSENT_BYTES are queued: then the rest
  # wait, the connection held (Backpressure).
  def answer
    out = +''
    room_bytes = MAX_UNSENT_BYTES - get_outbound_data_size
    body_pending = false
    while !@closing && out.bytesize < room_bytes && complete_request?
      response = next_response
      if response.nil? # the rest of a body is still to come
        body_pending = true
        break
      end

      out << response
      @body_pending = false
    end
    send_data(out) unless out.empty?
    if @closing
      close_connection_after_writing
    elsif body_pending
      # The body is due from the end of its head, which arrived in this read or earlier.
      @due_at_s = monotonic_s + @deadlines.body_timeout_s unless @body_pending
      @body_pending = true
    elsif !out.empty?
      @due_at_s = monotonic_s + @deadlines.head_timeout_s # the next head, from this response
    end
    held = !@closing && !body_pending && out.bytesize >= room_bytes && complete_request?
    hold(held) if held != @held
  end

  def hold(held)
    @held = held
    if held
      @backpressure.hold(self)
    else
      @backpressure.forget(self)
    end
  end

  # Whether the buffer holds a whole request head (or a head that is already too big).
  def complete_request?
    @buffer.sub!(/\A(?:\r\n)+/, '') # empty lines before a request line are allowed
    @buffer.include?("\r\n\r\n") || @buffer.bytesize > MAX_HEAD_BYTES
  end

  def next_response
    head_end = @buffer.index("\r\n\r\n")
    return refuse(431) if head_end.nil? || head_end > MAX_HEAD_BYTES

    lines = @buffer[0, head_end].split("\r\n", -1)
    request_line = REQUEST_LINE.match(lines.shift)
    return refuse(400) unless request_line

    method, target, major, minor = request_line.captures
    return refuse(505) unless major == '1' && %w[0 1].include?(minor)

    headers = parse_headers(lines)
    return refuse(400) unless headers

    body_bytes = body_length(headers)
    return refuse(400) if body_bytes == :invalid
    return refuse(413) if body_bytes > MAX_BODY_BYTES

    chunked = headers.key?('transfer-encoding')
    # Ambiguous framing is refused (RFC 9112 §6.3): a coding other than chunked, or
    # chunked together with a Content-Length.
    return refuse(400) if chunked && (headers['transfer-encoding'].downcase != 'chunked' || headers.key?('content-length'))
    body_bytes = 0 if chunked
    # Wait for the whole body of a request with Content-Length (it is read and dropped).
    return nil if @buffer.bytesize < head_end + 4 + body_bytes

    @buffer = @buffer.byteslice(head_end + 4 + body_bytes, @buffer.bytesize)
    keep_alive = keep_alive?(minor, headers['connection']) && !chunked
    # A chunked body is not decoded: answer, then close instead of misreading it.
    @closing = true unless keep_alive
    respond(method, target, minor, keep_alive, headers)
  end

  def parse_headers(lines)
    headers = {}
    lines.each do |line|
      match = HEADER_LINE.match(line)
      return nil unless match # also refuses obsolete line folding

      name = match[1].downcase
      headers[name] = headers.key?(name) ? "#{headers[name]}, #{match[2]}" : match[2]
    end
    headers
  end

  def body_length(headers)
    value = headers['content-length']
    return 0 if value.nil?

    values = value.split(',').map(&:strip).uniq
    return :invalid unless values.size == 1 && values.first.match?(/\A\d{1,15}\z/)

    values.first.to_i
  end

  def keep_alive?(minor, connection)
    tokens = (connection || '').downcase.split(',').map(&:strip)
    return false if tokens.include?('close')

    minor == '1' || tokens.include?('keep-alive')
  end

  def respond(method, target, minor, keep_alive, headers)
    path = target.start_with?('/') ? target.split('?', 2).first : target.sub(%r{\Ahttps?://[^/]*}i, '')
    case path
    when '/', '/counter'
      return reply(405, 'method not allowed', TEXT_CONTENT_TYPE, minor, keep_alive, method, allow: true) unless %w[GET HEAD].include?(method)

      @state.requests += 1
      if path == '/'
        reply(200, TEXT_BODY, TEXT_CONTENT_TYPE, minor, keep_alive, method)
      else
        reply(200, @state.counter_payload, JSON_CONTENT_TYPE, minor, keep_alive, method)
      end
    when *WORKLOAD_ROUTES
      return reply(405, 'method not allowed', TEXT_CONTENT_TYPE, minor, keep_alive, method, allow: true) unless %w[GET HEAD].include?(method)

      @state.requests += 1
      workload(path, headers, minor, keep_alive, method)
    else
      reply(404, NOT_FOUND_BODY, TEXT_CONTENT_TYPE, minor, keep_alive, method)
    end
  end

  # A workload route's reply: JSON serialized for this request, the document gzip-encoded
  # for this request when the client asks (Accept-Encoding), fixed bodies otherwise.
  def workload(path, headers, minor, keep_alive, method)
    case path
    when '/json'
      reply(200, JSON.generate(WORKLOADS['json_message']), JSON_CONTENT_TYPE, minor, keep_alive, method)
    when '/plaintext'
      reply(200, WORKLOADS['plaintext_body'], TEXT_CONTENT_TYPE, minor, keep_alive, method)
    when '/body/10k'
      reply(200, WORKLOADS['body_10k'], TEXT_CONTENT_TYPE, minor, keep_alive, method)
    else
      gzipped = wants_gzip?(headers['accept-encoding'])
      body = gzipped ? Zlib.gzip(JSON_COMP_BODY, level: WORKLOADS['gzip_level']) : JSON_COMP_BODY
      extra = "Vary: Accept-Encoding\r\n#{gzipped ? "Content-Encoding: gzip\r\n" : ''}"
      reply(200, body, JSON_CONTENT_TYPE, minor, keep_alive, method, extra: extra)
    end
  end

  def wants_gzip?(accept_encoding)
    (accept_encoding || '').downcase.split(',').each do |coding|
      name, *params = coding.split(';').map(&:strip)
      next unless %w[gzip x-gzip].include?(name)

      weight = params.join.delete(' ').delete_prefix('q=')
      return params.empty? || weight.to_f.positive?
    end
    false
  end

  def refuse(status)
    @state.bad += 1
    @closing = true
    reply(status, REASONS[status].downcase, TEXT_CONTENT_TYPE, '1', false, 'GET')
  end

  def reply(status, body, content_type, minor, keep_alive, method, allow: false, extra: nil)
    head = +"HTTP/1.1 #{status} #{REASONS[status]}\r\nServer: #{SERVER_HEADER}\r\n" \
            "Date: #{@state.date}\r\nContent-Type: #{content_type}\r\n" \
            "Content-Length: #{body.bytesize}\r\n"
    head << "Allow: GET, HEAD\r\n" if allow
    head << extra if extra
    if !keep_alive
      head << "Connection: close\r\n"
    elsif minor == '0'
      head << "Connection: keep-alive\r\n"
    end
    head << "\r\n"
    head << body unless method == 'HEAD'
    head
  end
end

def open_listener(host, port, reuse_port)
  family = host.include?(':') ? Socket::AF_INET6 : Socket::AF_INET
  socket = Socket.new(family, Socket::SOCK_STREAM, 0)
  socket.setsockopt(Socket::SOL_SOCKET, Socket::SO_REUSEADDR, true)
  socket.setsockopt(Socket::SOL_SOCKET, Socket::SO_REUSEPORT, true) if reuse_port
  # Inherited by accepted sockets: no 40 ms delayed-ACK stalls (docs/contract.md).
  socket.setsockopt(Socket::IPPROTO_TCP, Socket::TCP_NODELAY, true)
  socket.bind(Addrinfo.tcp(host, port))
  socket.listen(LISTEN_BACKLOG)
  socket
end

def open_listeners(options)
  listeners = []
  port = options.port
  options.workers.times do
    listener = open_listener(options.host, port, options.workers > 1)
    port = listener.local_address.ip_port
    listeners << listener
  end
  listeners
end

# Serve on `listener` until SIGTERM/SIGINT; the first telemetry line says it is listening.
def run_worker(listener, worker, options)
  state = ServerState.new(worker, listener.local_address.ip_port)
  deadlines = ClientDeadlines.new(options.head_timeout_s, options.body_timeout_s)
  backpressure = Backpressure.new
  EventMachine.epoll
  _, nofile_hard = Process.getrlimit(:NOFILE)
  EventMachine.set_descriptor_table_size([nofile_hard, 1_048_576].min)
  %w[TERM INT].each { |signal| Signal.trap(signal) { EventMachine.stop } }
  EventMachine.run do
    tls_parameters = options.tls? ? options.tls_parameters : nil
    EventMachine.attach_server(listener, HttpConnection, state, deadlines, backpressure, tls_parameters)
    EventMachine.add_periodic_timer(deadlines.sweep_interval_s) { deadlines.sweep }
    EventMachine.add_periodic_timer(Backpressure::CHECK_INTERVAL_S) { backpressure.check }
    EventMachine.add_periodic_timer(TICK_INTERVAL_S) { state.tick }
    EventMachine.add_periodic_timer(TELEMETRY_INTERVAL_S) { state.emit_telemetry }
    state.emit_telemetry
  end
  state.emit_telemetry
end

# Fork one worker per listener and wait for them. A worker that dies unasked stops the
# server, as the Python supervisor does (servers/__main__.py): it is named on stderr, the
# others get SIGTERM and the supervisor exits 1.
def supervise(listeners, options)
  children = listeners.each_with_index.to_h do |listener, worker|
    pid = fork do
      listeners.each { |other| other.close unless other.equal?(listener) }
      run_worker(listener, worker, options)
      exit!(0)
    end
    [pid, worker]
  end
  listeners.each(&:close)
  stopping = false
  forward = lambda do |signal|
    children.each_key do |pid|
      Process.kill(signal, pid)
    rescue Errno::ESRCH
      nil
    end
  end
  %w[TERM INT].each do |signal|
    Signal.trap(signal) do
      stopping = true
      forward.call(signal)
    end
  end
  worst = 0
  until children.empty?
    pid, status = Process.wait2
    worker = children.delete(pid)
    next if worker.nil?

    worst = 1 unless status.success?
    next if stopping

    stopping = true
    worst = 1
    how = if status.signaled?
            "was killed by SIG#{Signal.signame(status.termsig)}"
          else
            "exited with status #{status.exitstatus}"
          end
    warn "servers: worker #{worker} (pid #{pid}) #{how}: stopping the other workers"
    forward.call('TERM')
  end
  worst
end

def main(argv)
  $stdout.sync = true
  options = parse_options(argv)
  begin
    listeners = open_listeners(options)
  rescue SystemCallError, SocketError => e
    warn "eventmachine: cannot listen on #{options.host}:#{options.port}: #{e.message}"
    return 1
  end
  if options.workers == 1
    run_worker(listeners.first, 0, options)
    return 0
  end
  supervise(listeners, options)
end

exit(main(ARGV)) if $PROGRAM_NAME == __FILE__
