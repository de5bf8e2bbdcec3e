#!/usr/bin/env python3
# The kernel's cost of the event fan-out's shape, with no HTTP and no service:
# N loopback TCP connections, each sent CHUNK bytes every GAP seconds (as each
# event tail's read goes to each subscriber), read by a second process with
# epoll. Prints the sender's system CPU per chunk: the floor under the service's
# fan-out (docs/PERFORMANCE.md, "Events: the readers on the lean client").
# The reader's figures include Python's own wake-ups; read them as an upper bound.
#
# usage: python3 scripts/loopback-floor.py N CHUNK GAP SECONDS
#        (e.g. 1000 10000 0.05 10)
import os, socket, select, sys, time, resource
N=int(sys.argv[1]); CHUNK=int(sys.argv[2]); GAP=float(sys.argv[3]); SECS=float(sys.argv[4])
srv=socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR,1)
srv.bind(("127.0.0.1",0)); srv.listen(4096); port=srv.getsockname()[1]
r,w=os.pipe()
pid=os.fork()
if pid==0:
    # reader
    socks=[]
    for i in range(N):
        s=socket.create_connection(("127.0.0.1",port)); s.setblocking(False); socks.append(s)
    os.write(w,b"x")
    ep=select.epoll()
    for s in socks: ep.register(s.fileno(), select.EPOLLIN)
    fd2s={s.fileno():s for s in socks}
    t0=time.time(); u0=resource.getrusage(resource.RUSAGE_SELF)
    got=0
    while time.time()-t0<SECS+1:
        for fd,ev in ep.poll(0.2):
            try:
                d=fd2s[fd].recv(262144); got+=len(d)
            except BlockingIOError: pass
    u1=resource.getrusage(resource.RUSAGE_SELF)
    print(f"reader: sys {u1.ru_stime-u0.ru_stime:.2f}s user {u1.ru_utime-u0.ru_utime:.2f}s bytes {got}")
    os._exit(0)
conns=[srv.accept()[0] for i in range(N)]
os.read(r,1)
for c in conns: c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY,1)
data=b"x"*CHUNK
u0=resource.getrusage(resource.RUSAGE_SELF); t0=time.time(); sent=0
nxt=t0
while time.time()-t0<SECS:
    for c in conns: c.send(data); sent+=1
    nxt+=GAP
    d=nxt-time.time()
    if d>0: time.sleep(d)
u1=resource.getrusage(resource.RUSAGE_SELF)
el=time.time()-t0
print(f"sender: {sent} chunks in {el:.1f}s ({sent/el:.0f}/s), sys {u1.ru_stime-u0.ru_stime:.2f}s ({(u1.ru_stime-u0.ru_stime)/sent*1e6:.1f} us/chunk), user {u1.ru_utime-u0.ru_utime:.2f}s")
os.waitpid(pid,0)
