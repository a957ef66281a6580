# man/local.mk: the apps' man pages (section 1), made at build time by help2man from the
# --help of each app and sub-command. man/descriptions has one line per page (its name,
# then its NAME line); man/see-also.h2m is added to every page. A sub-command's page is
# named APP-COMMAND (clmoe-bench-gemm) and made through a two-line script in man/bin/.
# Without help2man the build skips them and says so: configure looks for it, and make
# looks again when configure found none (one installed later is then used).
CLMOE_MAN_PAGES = man/clmoe-info.1 man/clmoe-xcheck.1 man/clmoe-train.1 man/clmoe-plan.1 \
	man/clmoe-generate.1 man/clmoe-bench.1 man/clmoe-bench-gemm.1 man/clmoe-bench-kda.1 \
	man/clmoe-bench-mla.1 man/clmoe-bench-moe.1 man/clmoe-bench-sample.1 man/clmoe-bench-gemv.1 man/clmoe-op.1 man/clmoe-op-kda.1 \
	man/clmoe-op-mla.1 man/clmoe-op-compare.1
clmoeman1dir = $(mandir)/man1
EXTRA_DIST += man/descriptions man/see-also.h2m

all-local: man/pages.stamp
man/pages.stamp: $(bin_PROGRAMS) $(srcdir)/man/descriptions $(srcdir)/man/see-also.h2m
	@h2m='$(HELP2MAN)'; test -n "$$h2m" || h2m=`command -v help2man 2> /dev/null` || h2m=; \
	if test -z "$$h2m"; then \
	  echo "  MAN      skipped: help2man was not found (Debian: help2man), no man pages built"; \
	  rm -f $@; exit 0; fi; \
	$(MKDIR_P) man/bin; \
	for page in $(CLMOE_MAN_PAGES); do \
	  name=`basename $$page .1`; app=`echo $$name | cut -d- -f1-2`; sub=`echo $$name | cut -d- -f3-`; \
	  desc=`sed -n "s/^$$name //p" $(srcdir)/man/descriptions`; \
	  test -n "$$desc" || { echo "$(srcdir)/man/descriptions: no line for $$name" >&2; exit 1; }; \
	  printf '#!/bin/sh\nexec "%s" %s "$$@"\n' "$(abs_builddir)/apps/$$app$(EXEEXT)" "$$sub" > man/bin/$$name && \
	  chmod +x man/bin/$$name || exit 1; \
	  echo "  MAN      $$page"; \
	  "$$h2m" --no-info --section=1 --manual="clmoe manual" --source="clmoe $(VERSION)" --name="$$desc" \
	    --version-string="$$name $(VERSION)" --include=$(srcdir)/man/see-also.h2m \
	    --output=$$page.tmp man/bin/$$name && mv -f $$page.tmp $$page || exit 1; \
	done; touch $@

# installed when they were built
install-data-local:
	@if test -f man/pages.stamp; then \
	  $(MKDIR_P) '$(DESTDIR)$(clmoeman1dir)' || exit 1; \
	  for page in $(CLMOE_MAN_PAGES); do \
	    echo " $(INSTALL_DATA) $$page '$(DESTDIR)$(clmoeman1dir)'"; \
	    $(INSTALL_DATA) $$page '$(DESTDIR)$(clmoeman1dir)' || exit 1; \
	  done; \
	else echo "  man pages not installed: none were built (help2man was not found)"; fi
uninstall-local:
	@for page in $(CLMOE_MAN_PAGES); do rm -f '$(DESTDIR)$(clmoeman1dir)'/`basename $$page`; done

clean-local: clean-man
.PHONY: clean-man
clean-man:
	rm -rf $(CLMOE_MAN_PAGES) man/pages.stamp man/*.1.tmp man/bin
